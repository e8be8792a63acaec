//! Energy and carbon: every run measures them, under the given intensity series, and
//! `carbon-pause` moves work out of the dirty hours.

use apiary_model::energy::Intensity;
use apiary_model::{ClusterSpec, HOUR, Job};
use apiary_policy::{Params, registry};
use apiary_report::{Percentile, Summary};
use apiary_sim::{Config, DurationModel};
use std::sync::Arc;

fn run(policy: &str, params: &[&str], jobs: Vec<Job>, carbon: Option<Intensity>) -> Summary {
    let c = ClusterSpec::preset("n1g2").unwrap().build().unwrap();
    let mut p =
        registry::build(policy, &Params::from_pairs(params.iter().copied()).unwrap()).unwrap();
    let cfg = Config {
        carbon: carbon.map(Arc::new),
        ..Config::default()
    };
    let out = apiary_sim::run(c, jobs, p.as_mut(), &DurationModel, &cfg, &mut |_| {}).unwrap();
    Summary::of(&out, Percentile::NearestRank)
}

/// Hours alternating clean (100 g/kWh) and dirty (300).
fn alternating() -> Intensity {
    Intensity::new("test", vec![100.0, 300.0], 0)
}

#[test]
fn energy_and_carbon_follow_busy_gpus_and_the_hour() {
    // One 1-GPU job of 2 h on a node of two V100s (213 W busy, 47.5 W idle): FIFO runs
    // it through a clean and a dirty hour.
    let s = run(
        "fifo",
        &[],
        vec![Job::new("a", 0, 1, 2 * HOUR)],
        Some(alternating()),
    );
    let busy_kwh = 0.213 * 2.0;
    assert!((s.energy_kwh.unwrap() - busy_kwh).abs() < 1e-9);
    // 0.213 kW for an hour at 100 g/kWh and one at 300: 85.2 g.
    assert!(
        (s.carbon_kg.unwrap() - 0.0852).abs() < 1e-9,
        "{:?}",
        s.carbon_kg
    );
    // The idle GPU and the busy one over both hours: (0.213 + 0.0475) kW x 400 g.
    let cluster = (0.213 + 0.0475) * 0.4;
    assert!((s.cluster_carbon_kg.unwrap() - cluster).abs() < 1e-9);
    let m = s.energy_model.unwrap();
    assert_eq!((m.intensity.as_str(), m.intensity_mean), ("test", 200.0));
    // Without a series, the documented constant.
    let d = run("fifo", &[], vec![Job::new("a", 0, 1, HOUR)], None);
    assert!((d.carbon_kg.unwrap() - 0.213 * 0.289).abs() < 1e-9);
}

#[test]
fn carbon_pause_runs_only_in_clean_hours() {
    // Above the series' mean (200) every job pauses: 3 h of work in hours 0, 2 and 4.
    let jobs = vec![Job::new("a", 0, 1, 3 * HOUR)];
    let s = run("carbon-pause", &[], jobs.clone(), Some(alternating()));
    assert_eq!(s.jct_mean, 5.0 * 3600.0);
    assert_eq!(s.preemptions, 2);
    // All of its carbon at 100 g/kWh: a third less than FIFO's, with two dirty hours.
    assert!((s.carbon_kg.unwrap() - 0.213 * 3.0 * 0.1).abs() < 1e-9);
    let f = run("fifo", &[], jobs.clone(), Some(alternating()));
    assert!((f.carbon_kg.unwrap() - 0.213 * 0.5).abs() < 1e-9);
    assert_eq!(f.jct_mean, 3.0 * 3600.0);
    // A threshold above every hour runs it straight through.
    let s = run(
        "carbon-pause",
        &["threshold=300"],
        jobs,
        Some(alternating()),
    );
    assert_eq!((s.jct_mean, s.preemptions), (3.0 * 3600.0, 0));
}

#[test]
fn a_threshold_no_hour_meets_is_refused() {
    let c = ClusterSpec::preset("n1g2").unwrap().build().unwrap();
    let mut p = registry::build(
        "carbon-pause",
        &Params::from_pairs(["threshold=50"]).unwrap(),
    )
    .unwrap();
    let cfg = Config {
        carbon: Some(Arc::new(alternating())),
        ..Config::default()
    };
    let e = apiary_sim::run(
        c,
        vec![Job::new("a", 0, 1, HOUR)],
        p.as_mut(),
        &DurationModel,
        &cfg,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("below every hour's intensity"), "{e}");
}

/// A 1-GPU job of 3 h that trains 1.8 times as fast on two GPUs.
fn elastic_job() -> Job {
    let mut j = Job::new("e", 0, 1, 3 * HOUR);
    j.extras_mut().scaling = Some(apiary_model::Scaling::new(vec![(1, 1.0), (2, 1.8)], 2).unwrap());
    j
}

#[test]
fn greenflow_grows_without_a_budget_and_waits_for_clean_hours_with_a_small_one() {
    // No budget: both GPUs from the start, 3 h of one-GPU work in 3/1.8 h.
    let s = run(
        "greenflow",
        &["overhead=false"],
        vec![elastic_job()],
        Some(alternating()),
    );
    assert_eq!(s.jct_mean, 3.0 * 3600.0 / 1.8);
    // No carbon to spend: one GPU (the cheapest work), in the clean hours only (the
    // floor percentile's, here 100 g/kWh): hours 0, 2 and 4, as carbon-pause.
    let s = run(
        "greenflow",
        &["overhead=false", "budget_kg=0"],
        vec![elastic_job()],
        Some(alternating()),
    );
    assert_eq!((s.jct_mean, s.preemptions), (5.0 * 3600.0, 2));
    assert!((s.carbon_kg.unwrap() - 0.213 * 3.0 * 0.1).abs() < 1e-9);
    // Restarts cost ElasticFlow's overhead: 2 s + 27 s + 2 (log2 1 + 1) s on a
    // 2-GPU cluster, at each of the three starts.
    let o = run(
        "greenflow",
        &["budget_kg=0"],
        vec![elastic_job()],
        Some(alternating()),
    );
    assert!(o.jct_mean > s.jct_mean, "{} {}", o.jct_mean, s.jct_mean);
}

#[test]
fn greenflow_needs_throughput_tables() {
    let c = ClusterSpec::preset("n1g2").unwrap().build().unwrap();
    let mut p = registry::build("greenflow", &Params::default()).unwrap();
    let e = apiary_sim::run(
        c,
        vec![Job::new("a", 0, 1, HOUR)],
        p.as_mut(),
        &DurationModel,
        &Config::default(),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("throughput table"), "{e}");
}

#[test]
fn carbon_window_starts_each_job_at_its_cleanest_window() {
    // Submitted in a dirty hour (hour 1 at 300): a 1 h job waits for hour 2 (100).
    let jobs = vec![Job::new("a", HOUR, 1, HOUR)];
    let s = run("carbon-window", &[], jobs.clone(), Some(alternating()));
    assert_eq!(s.jct_mean, 2.0 * 3600.0);
    assert!((s.carbon_kg.unwrap() - 0.213 * 0.1).abs() < 1e-9);
    // Not allowed to wait: at once, at 300.
    let s = run("carbon-window", &["max_wait=0"], jobs, Some(alternating()));
    assert_eq!(s.jct_mean, 3600.0);
    assert!((s.carbon_kg.unwrap() - 0.213 * 0.3).abs() < 1e-9);
}

#[test]
fn a_power_limit_slows_jobs_and_cuts_their_power_as_zeus_measured() {
    // A ResNet-50 of 1 h on a V100 capped at 60 % (150 W of Zeus's 250): Zeus measured
    // 1.169x the time at 0.654x the power.
    let mut j = Job::new("r", 0, 1, HOUR);
    j.model = Some("resnet50".into());
    let c = ClusterSpec::preset("n1g2").unwrap().build().unwrap();
    let mut p = registry::build("fifo", &Params::default()).unwrap();
    let cfg = Config {
        power_limit: Some(0.6),
        ..Config::default()
    };
    let out = apiary_sim::run(c, vec![j], p.as_mut(), &DurationModel, &cfg, &mut |_| {}).unwrap();
    let hours = out.jobs[0].finish.unwrap() as f64 / HOUR as f64;
    assert!((hours - 1.169).abs() < 1e-6, "{hours}");
    let s = Summary::of(&out, Percentile::NearestRank);
    // 213 W busy at the top limit, times 0.654, for 1.169 h.
    let kwh = 0.213 * 0.654 * 1.169;
    assert!(
        (s.energy_kwh.unwrap() - kwh).abs() < 1e-6,
        "{:?}",
        s.energy_kwh
    );
    assert_eq!(s.energy_model.unwrap().power_limit, Some(0.6));
}

#[test]
fn greenflow_caps_power_where_a_capped_step_buys_work_for_less_carbon() {
    // The elastic job as a ResNet-50, with the V100's 60 % limit on offer (Zeus: 1.169x
    // the time at 0.654x the power). Without a budget it runs in the clean hours only,
    // where a step costs at most the floor's price c per unit of work. There, one
    // capped GPU costs 0.654c for 1/1.169 of the work (0.765c per work, under c), and
    // a second capped GPU 0.654c more for 0.8/1.169 more work (0.956c, under c), while
    // an uncapped second GPU would cost 1.43c: two GPUs at 60 %, 1.8/1.169 = 1.54x the
    // work of one GPU, in hours 0 and 2.
    let mut j = elastic_job();
    j.model = Some("resnet50".into());
    let s = run(
        "greenflow",
        &["overhead=false", "budget_kg=0", "power_limits=1,0.6"],
        vec![j.clone()],
        Some(alternating()),
    );
    let rate = 1.8 / 1.169;
    let hours = 2.0 + (3.0 - rate) / rate;
    assert!(
        (s.jct_mean / 3600.0 - hours).abs() < 1e-3,
        "{}",
        s.jct_mean / 3600.0
    );
    // Two GPUs at 0.654 x 213 W for the time it ran, at 100 g/kWh.
    let kg = 2.0 * 0.213 * 0.654 * (hours - 1.0) * 0.1;
    assert!(
        (s.carbon_kg.unwrap() - kg).abs() < 1e-6,
        "{:?} {kg}",
        s.carbon_kg
    );
    // Less time and less carbon than uncapped at the same (empty) budget: 5 h, 0.0639 kg.
    let top = run(
        "greenflow",
        &["overhead=false", "budget_kg=0"],
        vec![j],
        Some(alternating()),
    );
    assert!(s.jct_mean < top.jct_mean && s.carbon_kg < top.carbon_kg);
    assert_eq!(top.energy_model.unwrap().power_limit, None);
}

/// The issue's check on the real trace: on ITP cluster10 (`n32g8`) under CISO's 2022
/// series, GreenFlow given the carbon carbon-pause emitted emits no more and has the
/// lower mean JCT (docs/policies/greenflow.md).
#[test]
fn greenflow_beats_carbon_pause_at_its_carbon_on_itp_cluster10() {
    let Some(trace) = crate::shared("traces/itp/elasticflow/cluster10.csv") else {
        return;
    };
    let jobs = apiary_trace::read(&trace, &Default::default())
        .unwrap()
        .jobs;
    let ciso = Arc::new(apiary_trace::carbon::read_intensity("CISO").unwrap());
    let go = |policy: &str, params: &[String]| {
        let c = ClusterSpec::preset("n32g8").unwrap().build().unwrap();
        let ps = Params::from_pairs(params.iter().map(String::as_str)).unwrap();
        let mut p = registry::build(policy, &ps).unwrap();
        let cfg = Config {
            carbon: Some(ciso.clone()),
            ..Config::default()
        };
        let out = apiary_sim::run(
            c,
            jobs.clone(),
            p.as_mut(),
            &DurationModel,
            &cfg,
            &mut |_| {},
        )
        .unwrap();
        Summary::of(&out, Percentile::NearestRank)
    };
    let pause = go("carbon-pause", &[]);
    let budget = pause.carbon_kg.unwrap();
    let gf = go("greenflow", &[format!("budget_kg={budget}")]);
    assert!(
        gf.carbon_kg.unwrap() <= budget,
        "{:?} > {budget}",
        gf.carbon_kg
    );
    assert!(
        gf.jct_mean < pause.jct_mean,
        "{} {}",
        gf.jct_mean,
        pause.jct_mean
    );
    assert_eq!(gf.finished, pause.finished);
}
