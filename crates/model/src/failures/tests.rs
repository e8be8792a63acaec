use super::checkpoint::{
    self, Level, MIN_INTERVAL_S, PlanError, Rule, default_levels, parse_levels, plan, survival,
};
use super::montecarlo::simulate;
use super::*;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs().max(1e-12)
}

fn one_class(kind: Kind, rate_per_hour: f64, restart_s: f64) -> FailureModel {
    FailureModel::of(
        "test",
        restart_s,
        vec![FailureClass {
            name: "x".into(),
            kind,
            per: Per::Job,
            rate_per_hour,
            repair_hours: 0.0,
            shape: None,
        }],
    )
}

fn one_level(save_gbps: f64, restore_gbps: f64) -> Level {
    Level {
        name: "only".into(),
        survives: vec!["process".into(), "node".into(), "correlated".into()],
        save_gbps,
        overlap: 0.0,
        restore_gbps,
        aggregate_gbps: None,
        interval_s: None,
    }
}

#[test]
fn llama3_interrupts_a_16k_gpu_job_every_3_1_hours() {
    let m = FailureModel::preset("llama3").unwrap();
    // 419 interruptions in 54 days: 0.3233 an hour, one every 3.09 h.
    assert!(close(m.total_rate(16_384), 419.0 / 1296.0, 1e-12));
    assert!(close(1.0 / m.total_rate(16_384), 3.093, 1e-3));
    assert!(close(m.total_rate(8), 419.0 / 1296.0 / 2048.0, 1e-12));
}

#[test]
fn one_level_against_young_worked_by_hand() {
    // 3.6 failures an hour is 1e-3 a second. A 10 GB checkpoint on one node at 1 GB/s
    // stalls 10 s: Young's interval is sqrt(2 x 10 / 1e-3) = 141.42 s. Restoring at
    // 2 GB/s takes 5 s, restarting 20 s.
    let m = one_class(Kind::Process, 3.6, 20.0);
    let p = plan(&m, &[one_level(1.0, 2.0)], 8, 10e9, Rule::Young).unwrap();
    let l = &p.levels[0];
    assert!(close(l.stall_s, 10.0, 1e-12));
    assert!(close(l.restore_s, 5.0, 1e-12));
    assert!(close(l.interval_s, 141.421_356, 1e-6));
    // Failures cost 1e-3 x (70.71 + 24.69) of each second: the 25 s of recovery are cut
    // short by the next failure at times, (1 - e^-0.025) / 1e-3 = 24.69 s on average.
    // Saves take 10 / 141.42 of each second of training.
    let down = (1.0 - (-0.025_f64).exp()) / 1e-3;
    assert!(close(down, 24.690, 1e-4));
    let lost = 1e-3 * (70.710_678 + down);
    let want = (1.0 - lost) / (1.0 + 10.0 / 141.421_356);
    assert!(close(p.ettr, want, 1e-6), "{} vs {want}", p.ettr);
    assert!(close(p.waste.rework, 0.070_710_678, 1e-6));
    assert!(close(p.waste.restart, 1e-3 * down * 20.0 / 25.0, 1e-12));
    assert!(close(p.waste.total(), 1.0 - p.ettr, 1e-9));
}

#[test]
fn daly_refines_young_as_his_paper_writes() {
    // c = 10 s, M = 1000 s: sqrt(2cM) (1 + sqrt(c/2M)/3 + c/2M/9) - c = 134.83 s.
    let m = one_class(Kind::Process, 3.6, 0.0);
    let p = plan(&m, &[one_level(1.0, 1.0)], 8, 10e9, Rule::Daly).unwrap();
    let x: f64 = 10.0 / 2000.0;
    let want = (2.0 * 10.0 * 1000.0_f64).sqrt() * (1.0 + x.sqrt() / 3.0 + x / 9.0) - 10.0;
    assert!(close(p.levels[0].interval_s, want, 1e-12));
    assert!(close(want, 134.83, 1e-3));
}

#[test]
fn a_cap_saves_as_often_as_the_overhead_allows() {
    let m = one_class(Kind::Process, 3.6, 0.0);
    let levels = [one_level(1.0, 1.0), one_level(2.0, 1.0)];
    let p = plan(&m, &levels, 8, 10e9, Rule::Cap(0.05)).unwrap();
    // Two levels share 5 %: each 2.5 %, so 10 s every 400 s and 5 s every 200 s.
    assert!(close(p.levels[0].interval_s, 400.0, 1e-12));
    assert!(close(p.levels[1].interval_s, 200.0, 1e-12));
    assert!(close(
        p.levels.iter().map(|l| l.overhead()).sum::<f64>(),
        0.05,
        1e-12
    ));
}

#[test]
fn by_risk_each_level_saves_for_the_failures_it_recovers() {
    // Crashes (1e-3/s) recover from a host snapshot that stalls 0.01 s; node failures
    // (1e-4/s) from a peer's copy that stalls 1 s. Each level saves for its own risk:
    // sqrt(2 x 0.01 / 1e-3) = 4.47 s and sqrt(2 x 1 / 1e-4) = 141.4 s. A crash would
    // lose 70.7 s on average from the peer's copy against 2.2 s from the host's, so the
    // host keeps them.
    let m = FailureModel {
        classes: vec![
            FailureClass {
                name: "crash".into(),
                kind: Kind::Process,
                per: Per::Job,
                rate_per_hour: 3.6,
                repair_hours: 0.0,
                shape: None,
            },
            FailureClass {
                name: "node".into(),
                kind: Kind::Node,
                per: Per::Job,
                rate_per_hour: 0.36,
                repair_hours: 4.0,
                shape: None,
            },
        ],
        ..one_class(Kind::Process, 1.0, 0.0)
    };
    let level = |name: &str, survives: &[&str], gbps| Level {
        name: name.into(),
        survives: survives.iter().map(|s| s.to_string()).collect(),
        ..one_level(gbps, gbps)
    };
    // One node's 1 GB shard: 0.01 s at 100 GB/s, 1 s at 1 GB/s.
    let levels = [
        level("host", &["process"], 100.0),
        level("peer", &["process", "node"], 1.0),
    ];
    let p = plan(&m, &levels, 8, 1e9, Rule::Risk).unwrap();
    assert_eq!(p.recovery, [0, 1]);
    assert!(close(
        p.levels[0].interval_s,
        (2.0_f64 * 0.01 / 1e-3).sqrt(),
        1e-12
    ));
    assert!(close(
        p.levels[1].interval_s,
        (2.0_f64 * 1.0 / 1e-4).sqrt(),
        1e-12
    ));
    // Young's rule saves the peer's copy for both risks instead: sqrt(2 / 1.1e-3).
    let y = plan(&m, &levels, 8, 1e9, Rule::Young).unwrap();
    assert!(close(
        y.levels[1].interval_s,
        (2.0_f64 / 1.1e-3).sqrt(),
        1e-12
    ));
    assert!(p.ettr > y.ettr, "by risk {} vs Young {}", p.ettr, y.ettr);
    // Under Llama 3's rates the peer's copy costs little more than the host's and is
    // saved far more often, so it takes every class, and neither the host nor storage
    // (which no llama3 class needs) is saved at all.
    let m = FailureModel::preset("llama3").unwrap();
    let bytes = 405e9 * checkpoint::BYTES_PER_PARAM;
    let p = plan(&m, &default_levels(), 16_384, bytes, Rule::Risk).unwrap();
    let names: Vec<&str> = p
        .recovery
        .iter()
        .map(|&l| p.levels[l].name.as_str())
        .collect();
    assert_eq!(names, ["peer"; 4]);
    assert!(p.levels[0].interval_s.is_infinite() && p.levels[2].interval_s.is_infinite());
    let peer = &p.levels[1];
    let all = m.total_rate(16_384) / 3600.0;
    assert!(close(
        peer.interval_s,
        (2.0 * peer.stall_s / all).sqrt(),
        1e-12
    ));
    // 6.48 TB over 2,048 nodes is 3.164 GB each. Storage's 1 TB/s shared by 2,048 nodes
    // leaves each 0.488 GB/s, below its own 2: 6.48 s to write, a tenth of it stalling.
    let storage = &p.levels[2];
    assert!(
        close(storage.restore_s, 6.48, 1e-9),
        "{}",
        storage.restore_s
    );
    assert!(close(storage.stall_s, 0.648, 1e-9));
}

#[test]
fn the_closed_form_agrees_with_a_simulation_of_the_same_job() {
    // Llama 3 405B on 16,384 GPUs for its 54 days: the planner and failure-by-failure
    // runs of the same plan agree within half a point of ETTR over five seeds, with a
    // 10-minute restart and with a 30-minute one (where a sixth of the failures come
    // during a recovery). One seed's 419 +- 20 failures move its ETTR by about the
    // waste / sqrt(419): each seed lies within 2.5 points.
    let m = FailureModel::preset("llama3").unwrap();
    let slow = FailureModel {
        restart_s: 1800.0,
        ..m.clone()
    };
    let levels = default_levels();
    let survives = survival(&m, &levels);
    let bytes = 405e9 * checkpoint::BYTES_PER_PARAM;
    for (m, rule) in [
        (&m, Rule::Risk),
        (&m, Rule::Young),
        (&m, Rule::Cap(0.02)),
        (&slow, Rule::Risk),
    ] {
        let p = plan(m, &levels, 16_384, bytes, rule).unwrap();
        let mut sum = 0.0;
        for seed in 1..=5 {
            let r = simulate(m, &p, &survives, 1296.0, seed);
            assert!(
                (r.ettr() - p.ettr).abs() < 0.025,
                "{rule:?} seed {seed}: simulated {} planned {}",
                r.ettr(),
                p.ettr
            );
            sum += r.ettr();
            let n: u64 = r.failures.iter().sum();
            assert!((378..=460).contains(&n), "419 +- 2 sqrt(419): {n}");
        }
        let mean = sum / 5.0;
        assert!(
            (mean - p.ettr).abs() < 0.005,
            "{rule:?}: simulated {mean} planned {}",
            p.ettr
        );
    }
}

#[test]
fn a_simulated_run_counts_every_second_once_and_repeats_itself() {
    // A harsh model, so that failures hit saves, restores and restarts.
    let m = FailureModel {
        classes: vec![
            FailureClass {
                name: "crash".into(),
                kind: Kind::Process,
                per: Per::Job,
                rate_per_hour: 20.0,
                repair_hours: 0.0,
                shape: None,
            },
            FailureClass {
                name: "node".into(),
                kind: Kind::Node,
                per: Per::Node,
                rate_per_hour: 0.5,
                repair_hours: 1.0,
                shape: None,
            },
            FailureClass {
                name: "rack".into(),
                kind: Kind::Correlated,
                per: Per::Job,
                rate_per_hour: 2.0,
                repair_hours: 1.0,
                shape: None,
            },
        ],
        ..one_class(Kind::Process, 1.0, 60.0)
    };
    let levels = default_levels();
    let survives = survival(&m, &levels);
    let p = plan(
        &m,
        &levels,
        64,
        70e9 * checkpoint::BYTES_PER_PARAM,
        Rule::Risk,
    )
    .unwrap();
    let a = simulate(&m, &p, &survives, 200.0, 7);
    let spent = a.useful_s + a.rework_s + a.checkpoint_s + a.restore_s + a.restart_s;
    assert!(close(spent, a.wall_s, 1e-9), "{spent} vs {}", a.wall_s);
    assert!(a.failures.iter().all(|&n| n > 50), "{:?}", a.failures);
    assert_eq!(a, simulate(&m, &p, &survives, 200.0, 7));
    assert_ne!(a, simulate(&m, &p, &survives, 200.0, 8));
    // Lost work never exceeds what the newest surviving checkpoint leaves: per failure
    // at most the longest interval of a level that survives it, plus one of each save.
    let longest = p
        .levels
        .iter()
        .map(|l| l.interval_s)
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max);
    let n: u64 = a.failures.iter().sum();
    assert!(
        a.rework_s <= n as f64 * longest * 1.0001,
        "{} > {n} x {longest}",
        a.rework_s
    );
}

#[test]
fn bad_models_and_levels_name_the_field() {
    let e = FailureModel::parse("restart_s = 60\n[[class]]\nname = \"g\"\nkind = \"gpu\"\nper = \"gpu\"\nrate_per_hour = 1e-5\n", "f.toml")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("f.toml:") && e.contains("kind"), "{e}");
    let e = FailureModel::parse("restart_s = 60\n[[class]]\nname = \"g\"\nkind = \"node\"\nper = \"gpu\"\nrate_per_hour = -1\n", "f.toml")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "f.toml: class[0].rate_per_hour: must be 0 to 1,000 failures an hour of one GPU, node or job"
    );
    let m = FailureModel::parse(
        "restart_s = 60\ngpus_per_node = 4\n[[class]]\nname = \"rack\"\nkind = \"correlated\"\nper = \"node\"\nrate_per_hour = 1e-4\nrepair_hours = 8\n",
        "f.toml",
    )
    .unwrap();
    assert!(close(m.total_rate(16), 4e-4, 1e-12));
    let e = parse_levels(
        "[[level]]\nname = \"a\"\nsurvives = [\"process\"]\nsave_gbps = 0\nrestore_gbps = 1\n",
        "l.toml",
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "l.toml: level[0].save_gbps: must be above 0");
    // Host memory alone cannot bring a job back from a rack failure.
    let only_host = &default_levels()[..1];
    let e = plan(&m, only_host, 16, 1e9, Rule::Risk).unwrap_err();
    assert_eq!(
        e,
        PlanError::Unsurvived {
            class: "rack".into(),
            kind: "correlated"
        }
    );
    assert_eq!("cap:3.5%".parse::<Rule>(), Ok(Rule::Cap(0.035)));
    assert!("cap:2".parse::<Rule>().is_err());
    assert!("often".parse::<Rule>().is_err());
    assert!(matches!(
        "nope".parse::<Rule>(),
        Err(e) if e.contains("risk, young, daly")
    ));
    assert!(FailureModel::preset("philly-ish").is_none());
}

#[test]
fn fatal_classes_end_jobs_and_stay_out_of_checkpoint_plans() {
    // A job's own errors roll nothing back: a plan with a fatal class beside a process
    // one is the plan without it, and no level has to name it.
    let process = one_class(Kind::Process, 3.6, 20.0);
    let mut both = process.clone();
    both.classes.push(FailureClass {
        name: "bug".into(),
        kind: Kind::Fatal,
        per: Per::Job,
        rate_per_hour: 50.0,
        repair_hours: 0.0,
        shape: None,
    });
    let level = Level {
        survives: vec!["process".into()],
        ..one_level(1.0, 2.0)
    };
    let a = plan(&process, std::slice::from_ref(&level), 8, 10e9, Rule::Young).unwrap();
    let b = plan(&both, &[level], 8, 10e9, Rule::Young).unwrap();
    assert_eq!(
        (a.ettr, a.levels[0].interval_s),
        (b.ettr, b.levels[0].interval_s)
    );
    assert!(close(b.mtti_hours(), 1.0 / 3.6, 1e-12));
    // The `philly` preset is one fatal class, shaped as docs/failures.md derives.
    let p = FailureModel::preset("philly").unwrap();
    assert_eq!(p.classes.len(), 1);
    assert_eq!(
        (p.classes[0].kind, p.classes[0].per),
        (Kind::Fatal, Per::Job)
    );
    assert_eq!(
        (p.classes[0].rate_per_hour, p.classes[0].shape),
        (PHILLY_FATAL_PER_JOB_HOUR, Some(PHILLY_FATAL_SHAPE))
    );
}

#[test]
fn no_level_saves_more_than_once_a_second() {
    // 10 GB at 10^4 GB/s stalls 1 ms: Young's interval would be sqrt(2 x 1e-3 / 1e-3)
    // = 1.41 s at 3.6 failures an hour, and 0.141 s at 360; the floor takes the second.
    let level = one_level(1e4, 1e4);
    let slow = plan(
        &one_class(Kind::Process, 3.6, 20.0),
        std::slice::from_ref(&level),
        8,
        10e9,
        Rule::Young,
    )
    .unwrap();
    assert!(close(slow.levels[0].interval_s, 2f64.sqrt(), 1e-9));
    let fast = plan(
        &one_class(Kind::Process, 360.0, 20.0),
        std::slice::from_ref(&level),
        8,
        10e9,
        Rule::Young,
    )
    .unwrap();
    assert_eq!(fast.levels[0].interval_s, MIN_INTERVAL_S);
    let e = parse_levels(
        "[[level]]\nname = \"a\"\nsurvives = [\"process\"]\nsave_gbps = 1\nrestore_gbps = 1\ninterval_s = 0.5\n",
        "l.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "l.toml: level[0].interval_s: must be 1 s or more"
    );
    let e = FailureModel::parse("restart_s = 60\ncheckpoint_gb_per_gpu = 1e17\n[[class]]\nname = \"g\"\nkind = \"node\"\nper = \"gpu\"\nrate_per_hour = 1e-5\n", "f.toml")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "f.toml: checkpoint_gb_per_gpu: must be GB above 0, at most 10^6"
    );
}
