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
    assert!(
        jobs.iter()
            .all(|j| j.extras().adaptive.is_some() && j.duration == 0)
    );
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

/// Pollux's simulator runs its Tiresias baseline (two queues, 16 GPU-hours to demote)
/// every 60 s on the same adaptive jobs at the workload's batch sizes. Jobs that never
/// queue there finish within 1 % of the artifact's own JCTs for workload 6
/// (`simulator/results-jobload/tiresias-1.0/summary.json`): the job model (step times,
/// accumulation, statistical efficiency, epochs, the 30 s restart) is the artifact's.
#[test]
fn uncontended_jobs_finish_as_in_the_artifacts_tiresias_run() {
    let artifact = [
        ("cifar10-0", 947.0),
        ("cifar10-1", 966.0),
        ("deepspeech2-2", 3594.0),
        ("cifar10-3", 564.0),
        ("bert-4", 2534.0),
        ("cifar10-5", 659.0),
        ("ncf-6", 112.0),
        ("ncf-7", 120.0),
        ("cifar10-8", 944.0),
        ("ncf-9", 133.0),
        ("bert-10", 3144.0),
        ("cifar10-11", 942.0),
    ];
    let jobs: Vec<Job> = workload().into_iter().take(artifact.len()).collect();
    let c = ClusterSpec::preset("n16g4").unwrap().build().unwrap();
    let p = Params::from_pairs(["thresholds=57600", "placement=consolidated"]).unwrap();
    let mut pol = registry::build("tiresias", &p).unwrap();
    let cfg = Config {
        mode: apiary_sim::Mode::Slotted(60_000),
        ..Config::default()
    };
    let out = apiary_sim::run(c, jobs, pol.as_mut(), &DurationModel, &cfg, &mut |_| {}).unwrap();
    for (j, (id, want)) in out.jobs.iter().zip(artifact) {
        assert_eq!(j.id, id);
        let jct = (j.finish.expect("finished") - j.submit) as f64 / 1000.0;
        assert!(
            (jct - want).abs() <= 0.01 * want + 1.0,
            "{id}: {jct} s against the artifact's {want} s"
        );
    }
}

/// An event-driven policy moves and preempts adaptive jobs between their steps; a job
/// that trained its last epoch before such a move ends then (this run used to spin
/// forever on a job preempted after its last epoch).
#[test]
fn event_driven_policies_end_adaptive_jobs_they_move_between_steps() {
    let jobs: Vec<Job> = workload().into_iter().take(60).collect();
    let n = jobs.len();
    let c = ClusterSpec::preset("n16g4").unwrap().build().unwrap();
    let mut pol = registry::build("tiresias", &Params::default()).unwrap();
    let out = apiary_sim::run(
        c,
        jobs,
        pol.as_mut(),
        &DurationModel,
        &Config::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(out.jobs.iter().filter(|j| j.finish.is_some()).count(), n);
    assert!(
        out.jobs.iter().map(|j| j.preemptions).sum::<u32>() > 0,
        "jobs were preempted"
    );
    let cap = out.util.width as f64 * out.util.total_gpus as f64;
    assert!(out.util.busy.iter().all(|&b| b <= cap + 1e-6));
}
