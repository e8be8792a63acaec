//! Failures in the engine (`--failures`): replayed incidents worked by hand (a crash
//! rolls a job back to its last checkpoint; a node failure ends a gang and holds the
//! node down until its repair), then drawn failures on the Philly sample: every job
//! still finishes, work is counted once, lost work stays under the checkpoint interval,
//! and the same seed gives the same run.

use apiary_model::failures::FailureModel;
use apiary_model::{ClusterSpec, Job, RunOutcome, SECOND};
use apiary_policy::{Params, registry};
use apiary_sim::failures::Setting;
use apiary_sim::{Config, DurationModel};

const HOUR: u64 = 3600 * SECOND;

/// A model with no drawn failures, a near-free checkpoint level saved every
/// `interval_s`, and the events `events` (TOML tables).
fn model(kind: &str, interval_s: f64, events: &str) -> FailureModel {
    FailureModel::parse(
        &format!(
            r#"name = "test"
restart_s = 600
[[class]]
name = "x"
kind = "{kind}"
per = "node"
rate_per_hour = 0
repair_hours = 1
[[level]]
name = "peer"
survives = ["process", "node"]
save_gbps = 1e12
restore_gbps = 1e12
interval_s = {interval_s}
{events}"#
        ),
        "test.toml",
    )
    .unwrap()
}

fn run(cluster: &str, jobs: Vec<Job>, policy: &str, m: FailureModel, seed: u64) -> RunOutcome {
    let c = ClusterSpec::preset(cluster).unwrap().build().unwrap();
    let mut p = registry::build(policy, &Params::default()).unwrap();
    let cfg = Config {
        failures: Some(Setting::of(m).unwrap()),
        seed,
        ..Config::default()
    };
    apiary_sim::run(c, jobs, p.as_mut(), &DurationModel, &cfg, &mut |_| {}).unwrap()
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn a_crash_rolls_the_job_back_to_its_last_checkpoint() {
    // A 10-hour job on 8 GPUs saves every hour of work. At 2.5 h it crashes: the half
    // hour since its save at 2 h is lost, and it restarts at once (the GPUs are free)
    // but trains again only after the 10-minute restart. 7.5 h of work remain after
    // 2.5 h + 10 min: it ends at 10 h 40 min.
    let m = model(
        "process",
        3600.0,
        "[[event]]\nat_s = 9000\nclass = \"x\"\nnode = 0\n",
    );
    let o = run("n1g8", vec![Job::new("a", 0, 8, 10 * HOUR)], "fifo", m, 0);
    let j = &o.jobs[0];
    let end = j.finish.unwrap() as f64 / 1000.0;
    assert!(close(end, 38_400.0, 0.01), "{end}");
    assert_eq!(j.preemptions, 1);
    let f = o.failures.as_ref().unwrap();
    assert_eq!((f.total(), f.job_failures), (1, 1));
    // (0.5 h of work + 10 min) on 8 GPUs.
    assert!(close(
        f.lost_gpu_hours(),
        (1800.0 + 600.0) * 8.0 / 3600.0,
        1e-6
    ));
    // It held 8 GPUs for 10 h 40 min and kept 10 h of their work.
    assert!(
        close(f.goodput(), 36_000.0 / 38_400.0, 1e-6),
        "{}",
        f.goodput()
    );
    assert_eq!(f.down_gpu_ms, 0.0);
}

#[test]
fn a_fatal_failure_ends_the_job_failed_and_counts_its_gpu_time() {
    // An 8-GPU job of 10 h hits its own error at 2.5 h: it ends failed, nothing is
    // redone, and the job queued behind it starts then and runs its hour. Of the 28
    // GPU-hours jobs held, the failed one held 20.
    let m = model(
        "fatal",
        3600.0,
        "[[event]]\nat_s = 9000\nclass = \"x\"\nnode = 0\n",
    );
    let jobs = vec![Job::new("a", 0, 8, 10 * HOUR), Job::new("b", 0, 8, HOUR)];
    let o = run("n1g8", jobs, "fifo", m, 0);
    let (a, b) = (&o.jobs[0], &o.jobs[1]);
    assert!(a.rejected.as_deref().unwrap().contains("fatal"), "{a:?}");
    assert_eq!(a.gpu_time, 8 * 9000 * SECOND);
    assert_eq!(b.finish, Some(9000 * SECOND + HOUR));
    let f = o.failures.as_ref().unwrap();
    assert_eq!(
        (f.fatal_jobs, f.job_failures, f.lost_gpu_hours()),
        (1, 1, 0.0)
    );
    assert!(close(
        f.fatal_gpu_ms / f.allocated_gpu_ms,
        20.0 / 28.0,
        1e-9
    ));
    assert_eq!(f.down_gpu_ms, 0.0, "a fatal failure takes no node down");
}

/// The lower incomplete gamma function by its series (x here stays below 30).
fn lower_gamma(s: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let (mut term, mut sum) = (1.0 / s, 1.0 / s);
    for n in 1..5000 {
        term *= x / (s + f64::from(n));
        sum += term;
        if term < sum * 1e-15 {
            break;
        }
    }
    (s * x.ln() - x).exp() * sum
}

#[test]
fn philly_preset_fails_philly_jobs_and_gpu_time_as_the_trace_did() {
    // The preset's shape and scale are fit, in closed form, to the whole Philly
    // trace's run times and sizes; drawn over its 82,247 jobs (ten seeds: 30.48 +-
    // 0.18 % of jobs, 38.2 +- 1.7 % of GPU time) both land within sampling noise of
    // AcmeTrace's 30.5 % and 38.6 %.
    let Some(trace) = crate::shared("traces/philly/philly.csv") else {
        return;
    };
    let jobs = apiary_trace::read(&trace, &Default::default())
        .unwrap()
        .jobs;
    // In closed form: with T Weibull (shape k, scale eta hours), a job of d hours fails
    // before its end with probability 1 - e^(-x), x = (d/eta)^k, and holds its GPUs
    // E[min(T, d)] = (eta/k) lower_gamma(1/k, x) hours, of which d e^(-x) when it does
    // not fail.
    let (r, k) = (
        apiary_model::failures::PHILLY_FATAL_PER_JOB_HOUR,
        apiary_model::failures::PHILLY_FATAL_SHAPE,
    );
    let eta = 1.0 / r;
    let (mut failing, mut failed, mut held) = (0.0, 0.0, 0.0);
    for j in &jobs {
        let (d, g) = (j.duration as f64 / HOUR as f64, f64::from(j.gpus));
        let x = (d / eta).powf(k);
        let held_for = eta / k * lower_gamma(1.0 / k, x);
        failing += 1.0 - (-x).exp();
        failed += g * (held_for - d * (-x).exp());
        held += g * held_for;
    }
    let n = jobs.len() as f64;
    assert!(close(failing / n, 0.305, 0.0005), "{}", failing / n);
    assert!(close(failed / held, 0.386, 0.0005), "{}", failed / held);
    let m = FailureModel::preset("philly").unwrap();
    let o = run("philly", jobs, "fifo", m, 2);
    let f = o.failures.as_ref().unwrap();
    let share = f.fatal_gpu_ms / f.allocated_gpu_ms;
    assert!((0.34..0.43).contains(&share), "{share}");
    let failed = f.fatal_jobs as f64 / n;
    assert!((0.30..0.31).contains(&failed), "{failed}");
}

#[test]
fn a_shaped_class_strikes_at_weibull_ages_of_running_time() {
    // 4,000 one-GPU jobs of 8 h on a cluster that runs them all at once, under a fatal
    // class of shape 0.5 and scale 8 h: each fails before its end with probability
    // 1 - e^(-1) = 63.2 % (binomial sd 0.8 points). The same job draws the same age
    // under another policy.
    let m = FailureModel::parse(
        r#"restart_s = 0
[[class]]
name = "bug"
kind = "fatal"
per = "job"
rate_per_hour = 0.125
shape = 0.5
"#,
        "shape.toml",
    )
    .unwrap();
    let jobs: Vec<Job> = (0..4000)
        .map(|i| Job::new(format!("j{i}"), 0, 1, 8 * HOUR))
        .collect();
    let o = run("n500g8", jobs.clone(), "fifo", m.clone(), 7);
    let failed: Vec<bool> = o.jobs.iter().map(|j| j.rejected.is_some()).collect();
    let share = failed.iter().filter(|&&f| f).count() as f64 / 4000.0;
    assert!(close(share, 1.0 - (-1.0f64).exp(), 0.03), "{share}");
    let again = run("n500g8", jobs, "sjf", m, 7);
    let same: Vec<bool> = again.jobs.iter().map(|j| j.rejected.is_some()).collect();
    assert_eq!(failed, same);
    // Only fatal classes counted per job take a shape.
    let e = FailureModel::parse(
        "restart_s = 0\n[[class]]\nname = \"x\"\nkind = \"process\"\nper = \"gpu\"\nrate_per_hour = 1\nshape = 0.5\n",
        "bad.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("bad.toml") && e.contains("class[0].shape"),
        "{e}"
    );
}

#[test]
fn a_node_failure_ends_the_gang_and_holds_the_node_until_its_repair() {
    // A 16-GPU job over two nodes saves every 30 min of work. Node 1 fails at 4000 s
    // and is down for 2 h: the job loses the 400 s since its save at 3600 s and cannot
    // run until node 1 is back at 11,200 s; it trains again after the restart, from
    // 11,800 s, for the 32,400 s of work left: 44,200 s.
    let m = model(
        "node",
        1800.0,
        "[[event]]\nat_s = 4000\nclass = \"x\"\nnode = 1\nrepair_s = 7200\n",
    );
    let o = run("n2g8", vec![Job::new("a", 0, 16, 10 * HOUR)], "fifo", m, 0);
    let end = o.jobs[0].finish.unwrap() as f64 / 1000.0;
    assert!(close(end, 44_200.0, 0.01), "{end}");
    let f = o.failures.as_ref().unwrap();
    assert!(close(f.down_gpu_ms, 8.0 * 7200.0 * 1000.0, 1e-3));
    assert!(close(
        f.lost_gpu_hours(),
        (400.0 + 600.0) * 16.0 / 3600.0,
        1e-6
    ));
    // Meanwhile a one-node job fits beside the down node.
    let m = model(
        "node",
        1800.0,
        "[[event]]\nat_s = 4000\nclass = \"x\"\nnode = 1\nrepair_s = 7200\n",
    );
    let jobs = vec![
        Job::new("a", 0, 16, 10 * HOUR),
        Job::new("b", 5000 * SECOND, 8, HOUR),
    ];
    let o = run("n2g8", jobs, "sjf", m, 0);
    let b = &o.jobs[1];
    assert_eq!(
        b.first_start,
        Some(5000 * SECOND),
        "b runs on node 0 at once"
    );
}

#[test]
fn drawn_failures_count_work_once_and_repeat_with_the_seed() {
    let trace = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/traces/philly-sample.csv");
    let t = apiary_trace::read(&trace, &Default::default()).unwrap();
    // Harsh: a process crash per GPU every 40 days and a node failure per node every
    // 20, repaired in 2 h on average; checkpoints every 20 min of work. The first 600
    // jobs keep the debug build quick.
    let mut jobs = t.jobs.clone();
    jobs.truncate(600);
    let harsh = || {
        FailureModel::parse(
            r#"name = "harsh"
restart_s = 300
[[class]]
name = "crash"
kind = "process"
per = "gpu"
rate_per_hour = 1.05e-3
[[class]]
name = "board"
kind = "node"
per = "node"
rate_per_hour = 2.1e-3
repair_hours = 2
[[level]]
name = "peer"
survives = ["process", "node"]
save_gbps = 25
restore_gbps = 25
interval_s = 1200
"#,
            "harsh.toml",
        )
        .unwrap()
    };
    for policy in ["fifo", "tiresias", "antman"] {
        let a = run("n16g8", jobs.clone(), policy, harsh(), 3);
        let f = a.failures.as_ref().unwrap();
        assert!(f.job_failures > 20, "{policy}: {}", f.job_failures);
        assert!(f.down_gpu_ms > 0.0);
        // Every job ends, and the work each kept is its whole duration, once.
        assert!(a.jobs.iter().all(|j| j.finish.is_some()), "{policy}");
        let work: f64 = a
            .jobs
            .iter()
            .map(|j| j.duration as f64 * f64::from(j.gpus))
            .sum();
        assert!(
            (f.useful_gpu_ms - work).abs() <= 1e-6 * work,
            "{policy}: {} vs {work}",
            f.useful_gpu_ms
        );
        // Each failure loses at most one checkpoint interval per GPU struck.
        let widest = a.jobs.iter().map(|j| j.gpus).max().unwrap();
        assert!(
            f.rework_gpu_ms <= f.job_failures as f64 * 1_200_000.0 * f64::from(widest),
            "{policy}"
        );
        // Held GPU time covers the work, the rework and the recovery.
        let held: f64 = a.jobs.iter().map(|j| j.gpu_time as f64).sum();
        assert!(held >= work, "{policy}");
        assert!(
            f.goodput() < 1.0 && f.goodput() > 0.5,
            "{policy}: {}",
            f.goodput()
        );
        // The same seed gives the same run; another seed another.
        let b = run("n16g8", jobs.clone(), policy, harsh(), 3);
        assert_eq!(a.jobs, b.jobs, "{policy}");
        assert_eq!(a.failures, b.failures, "{policy}");
        let c = run("n16g8", jobs.clone(), policy, harsh(), 4);
        assert_ne!(a.failures, c.failures, "{policy}");
    }
}

#[test]
fn a_job_struck_without_end_is_given_up_and_the_run_ends() {
    // A crash per GPU every 3.6 s against a 10-minute restart: no job ever trains. Each
    // is given up after its 1,000th failure, and the run ends.
    let m = FailureModel::parse(
        r#"restart_s = 600
[[class]]
name = "storm"
kind = "process"
per = "gpu"
rate_per_hour = 1000
"#,
        "storm.toml",
    )
    .unwrap();
    let jobs = vec![Job::new("a", 0, 8, HOUR), Job::new("b", 0, 4, HOUR)];
    let o = run("n2g8", jobs, "fifo", m, 0);
    for j in &o.jobs {
        assert!(j.finish.is_none(), "{}", j.id);
        assert!(
            j.rejected
                .as_deref()
                .is_some_and(|r| r.contains("never finished")),
            "{:?}",
            j.rejected
        );
    }
    assert!(o.failures.as_ref().unwrap().job_failures >= 2002);
}

#[test]
fn elastic_policies_go_on_with_the_nodes_left_after_a_failure() {
    // A job that runs 500 s on two one-GPU nodes (linear: 1,000 s on one), saving
    // every 50 s of work, almost free. Node 1 fails at 110 s for 1,000 s: the 10 s
    // since the save at 100 s are lost. EDF, ElasticFlow and GreenFlow plan on the
    // node in service: the job restarts on node 0 at once and does the 400 s left
    // (800 s on one GPU), ending at 910 s, where waiting for the repair would end it
    // at 1,510 s.
    for policy in ["edf", "elasticflow", "greenflow"] {
        let m = FailureModel::parse(
            r#"name = "test"
restart_s = 0
[[class]]
name = "x"
kind = "node"
per = "node"
rate_per_hour = 0
[[level]]
name = "peer"
survives = ["process", "node"]
save_gbps = 1e12
restore_gbps = 1e12
interval_s = 50
[[event]]
at_s = 110
class = "x"
node = 1
repair_s = 1000
"#,
            "test.toml",
        )
        .unwrap();
        let mut job = Job::new("a", 0, 2, 500 * SECOND);
        job.extras_mut().scaling =
            Some(apiary_model::Scaling::new(vec![(1, 1.0), (2, 2.0)], 2).unwrap());
        let c = ClusterSpec::preset("n2g1").unwrap().build().unwrap();
        // Without ElasticFlow's per-round overheads, to keep the sums by hand.
        let pairs: &[&str] = if policy == "greenflow" {
            &["overhead=false"]
        } else {
            &["slot=1", "overhead=false"]
        };
        let params = Params::from_pairs(pairs.iter().copied()).unwrap();
        let mut p = registry::build(policy, &params).unwrap();
        let cfg = Config {
            failures: Some(Setting::of(m).unwrap()),
            ..Config::default()
        };
        let o =
            apiary_sim::run(c, vec![job], p.as_mut(), &DurationModel, &cfg, &mut |_| {}).unwrap();
        let end = o.jobs[0].finish.unwrap() as f64 / 1000.0;
        assert!(close(end, 910.0, 0.01), "{policy}: {end}");
        assert_eq!(o.failures.as_ref().unwrap().job_failures, 1);
    }
}
