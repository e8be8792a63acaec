//! The online model (`--online`) and MuxFlow, worked by hand on one serving GPU and one
//! offline GPU: what an offline job beside a service runs at, and what the service's
//! SLO and the GPUs' utilisation come to; then MuxFlow against no sharing and naive
//! sharing on the Philly sample.

use apiary_model::online::OnlineLoad;
use apiary_model::{ClusterSpec, Job, RunOutcome, SECOND};
use apiary_policy::{Params, registry};
use apiary_sim::{Config, DurationModel};

/// Constant demand 0.3 on node 0's GPU, nothing on node 1's; memory always fits.
fn calm() -> OnlineLoad {
    OnlineLoad::parse(
        "hosts=0.5,peak_min=0.3,peak_max=0.3,trough=1,spike_prob=0,interference=0,mem_max=0.3,job_mem_max=0.3",
    )
    .unwrap()
}

fn run(policy: &str, params: &[&str], online: OnlineLoad) -> RunOutcome {
    let c = ClusterSpec::preset("n2g1").unwrap().build().unwrap();
    let jobs = vec![
        Job::new("a", 0, 1, 100 * SECOND),
        Job::new("b", 0, 1, 100 * SECOND),
    ];
    let mut p =
        registry::build(policy, &Params::from_pairs(params.iter().copied()).unwrap()).unwrap();
    let cfg = Config {
        online: Some(online),
        ..Config::default()
    };
    apiary_sim::run(c, jobs, p.as_mut(), &DurationModel, &cfg, &mut |_| {}).unwrap()
}

#[test]
fn sharing_modes_trade_slo_for_utilisation_as_worked_by_hand() {
    // MuxFlow: b beside the service at 1 − 0.3 − 0.05 = 0.65 of the SMs, to 153.8 s; the
    // service always has its 0.3: no violation; the serving GPU is busy throughout.
    let o = run("muxflow", &[], calm());
    let r = o.online.as_ref().unwrap();
    assert_eq!(r.host_gpus, 1);
    assert_eq!(r.slo_violation, 0.0);
    assert!((r.host_gpu_util - 1.0).abs() < 1e-9, "{}", r.host_gpu_util);
    // SMs: 0.3 served + 0.65 given.
    assert!(
        (r.host_sm_activity - 0.95).abs() < 1e-9,
        "{}",
        r.host_sm_activity
    );
    // Naive: 0.8 of the SMs to b (125 s); the service wants 0.3 and gets 0.2 all the
    // while: every service-minute of the run is short.
    let o = run("muxflow", &["sharing=naive"], calm());
    let r = o.online.as_ref().unwrap();
    assert!((r.slo_violation - 1.0).abs() < 1e-9, "{}", r.slo_violation);
    // None: b waits; the serving GPU runs only its service, 0.3 of the SMs and
    // 0.3 × 26/16 of the time, over the 200 s.
    let o = run("muxflow", &["sharing=none"], calm());
    let r = o.online.as_ref().unwrap();
    assert_eq!(r.slo_violation, 0.0);
    assert!((r.host_gpu_util - 0.3 * 26.0 / 16.0).abs() < 1e-9);
    assert!((r.host_sm_activity - 0.3).abs() < 1e-9);
    assert_eq!(r.evictions, 0);
    // A policy that knows nothing of the services (FIFO) puts one of the two there, at
    // the fixed 0.8: 125 s.
    let o = run("fifo", &[], calm());
    let mut ends: Vec<u64> = o.jobs.iter().map(|j| j.finish.unwrap()).collect();
    ends.sort_unstable();
    assert_eq!(ends, [100 * SECOND, 125 * SECOND]);
}

#[test]
fn interference_slows_the_offline_job_by_the_service_load() {
    let load = OnlineLoad {
        interference: 0.5,
        ..calm()
    };
    // 0.65 × (1 − 0.5 × 0.3) = 0.5525: 100 s of work in 181.0 s.
    let o = run("muxflow", &[], load);
    let b = o.jobs.iter().find(|j| &*j.id == "b").unwrap();
    let f = b.finish.unwrap() as f64 / 1000.0;
    assert!((f - 100.0 / 0.5525).abs() < 0.01, "{f}");
}

/// A day of jobs on 32 GPUs, half serving: MuxFlow raises the serving GPUs'
/// utilisation far over no sharing, with SLO violations an order below naive
/// sharing's, and evicts on spikes. (The Philly sample's figures are in
/// docs/sharing.md.)
#[test]
fn muxflow_raises_utilisation_with_few_slo_violations() {
    // 96 jobs, one every 15 minutes, of 1, 2 or 4 GPUs and 1 to 4 hours.
    let jobs: Vec<Job> = (0..96u64)
        .map(|i| {
            let gpus = [1, 1, 2, 4][(i % 4) as usize];
            Job::new(
                format!("j{i}"),
                i * 900 * SECOND,
                gpus,
                (1 + i % 4) * 3600 * SECOND,
            )
        })
        .collect();
    let go = |params: &[&str]| {
        let c = ClusterSpec::preset("n4g8").unwrap().build().unwrap();
        let mut p = registry::build(
            "muxflow",
            &Params::from_pairs(params.iter().copied()).unwrap(),
        )
        .unwrap();
        let cfg = Config {
            online: Some(OnlineLoad::default()),
            ..Config::default()
        };
        let o = apiary_sim::run(
            c,
            jobs.clone(),
            p.as_mut(),
            &DurationModel,
            &cfg,
            &mut |_| {},
        )
        .unwrap();
        o.online.unwrap()
    };
    let (mux, naive, none) = (go(&[]), go(&["sharing=naive"]), go(&["sharing=none"]));
    assert!(
        mux.host_gpu_util > 2.0 * none.host_gpu_util,
        "{mux:?} {none:?}"
    );
    assert_eq!(none.slo_violation, 0.0);
    assert!(
        mux.slo_violation * 10.0 < naive.slo_violation,
        "{mux:?} {naive:?}"
    );
    assert!(mux.evictions > 0 && naive.evictions == 0, "{mux:?}");
}
