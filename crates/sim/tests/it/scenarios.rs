//! Runs every `testdata/scenarios/*.txt`: a small command language above `----`, the
//! expected per-job outcome below (raft-rs style).
//!
//! ```text
//! cluster n1g4            (several presets join: `cluster n1g1-v100 n1g2-k80`)
//! policy fifo backfill=true
//! mode slot:60            (optional)
//! restart_overhead 5      (optional, seconds)
//! job a submit=0 gpus=2 duration=10   (optional vc=NAME; stages=DATA/GPU/NET ms with
//!                                       iters=N for Muri's interleaving;
//!                                       speeds=v100:1,k80:0.5 per GPU type;
//!                                       deadline=SECONDS; scaling=1:1,2:1.8 (GPUs:
//!                                       iterations/s) with max=GPUS and batch=N for
//!                                       elastic jobs, which run `duration` at `gpus`)
//! ----
//! a start=0 finish=10 preemptions=0
//! ```

use apiary_model::{ClusterSpec, Job};
use apiary_policy::{Params, registry};
use apiary_sim::{Config, DurationModel, Mode};
use std::path::PathBuf;

fn secs(v: &str) -> u64 {
    (v.parse::<f64>().expect("number") * 1000.0).round() as u64
}

fn run_scenario(text: &str) -> (String, String) {
    let (input, expected) = text
        .split_once("\n----\n")
        .expect("scenario needs a ---- line");
    let mut cluster = None;
    let mut policy = None;
    let mut cfg = Config::default();
    let mut jobs = Vec::new();
    for line in input
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let mut w = line.split_whitespace();
        match w.next().unwrap() {
            "cluster" => {
                // Several presets join into one cluster (a heterogeneous one when their
                // GPU types differ).
                let mut spec = ClusterSpec::preset(w.next().unwrap()).unwrap();
                for more in w {
                    spec.switches
                        .extend(ClusterSpec::preset(more).unwrap().switches);
                }
                cluster = Some(spec.build().unwrap())
            }
            "policy" => {
                let name = w.next().unwrap().to_string();
                let params = Params::from_pairs(w).unwrap();
                policy = Some(registry::build(&name, &params).unwrap());
            }
            "mode" => {
                cfg.mode = Mode::Slotted(secs(w.next().unwrap().strip_prefix("slot:").unwrap()))
            }
            "restart_overhead" => cfg.restart_overhead = secs(w.next().unwrap()),
            "job" => {
                let id = w.next().unwrap();
                let kv: std::collections::BTreeMap<&str, &str> =
                    w.map(|p| p.split_once('=').unwrap()).collect();
                let mut j = Job::new(
                    id,
                    secs(kv["submit"]),
                    kv["gpus"].parse().unwrap(),
                    secs(kv["duration"]),
                );
                j.vc = kv.get("vc").map(|v| v.to_string());
                if let Some(sp) = kv.get("speeds") {
                    j.type_speeds = Some(
                        sp.split(',')
                            .map(|e| {
                                let (t, v) = e.split_once(':').unwrap();
                                (t.to_string(), v.parse().unwrap())
                            })
                            .collect(),
                    );
                }
                if let Some(d) = kv.get("deadline") {
                    j.deadline = Some(secs(d));
                }
                if let Some(sc) = kv.get("scaling") {
                    let levels = sc
                        .split(',')
                        .map(|e| {
                            let (g, t) = e.split_once(':').unwrap();
                            (g.parse().unwrap(), t.parse().unwrap())
                        })
                        .collect();
                    let mut table =
                        apiary_model::Scaling::new(levels, kv["max"].parse().unwrap()).unwrap();
                    if let Some(b) = kv.get("batch") {
                        table = table.with_batch(b.parse().unwrap());
                    }
                    j.scaling = Some(table);
                }
                if let Some(p) = kv.get("priority") {
                    j.priority = p.parse().unwrap();
                }
                if let Some(st) = kv.get("stages") {
                    let v: Vec<f64> = st.split('/').map(|x| x.parse().unwrap()).collect();
                    j.stages = Some(apiary_model::StageTimes {
                        data: v[0],
                        gpu: v[1],
                        net: v[2],
                    });
                    j.iterations = Some(kv["iters"].parse().unwrap());
                }
                jobs.push(j);
            }
            other => panic!("unknown command {other}"),
        }
    }
    jobs.sort_by_key(|j| j.submit);
    let mut p = policy.expect("policy line");
    let out = apiary_sim::run(
        cluster.expect("cluster line"),
        jobs,
        p.as_mut(),
        &DurationModel,
        &cfg,
        &mut |_| {},
    )
    .unwrap();
    let mut got: Vec<String> = out
        .jobs
        .iter()
        .map(|j| {
            if j.rejected.is_some() {
                return format!("{} rejected", j.id);
            }
            let f =
                |t: Option<u64>| t.map_or("-".to_string(), |t| format!("{}", t as f64 / 1000.0));
            format!(
                "{} start={} finish={} preemptions={}",
                j.id,
                f(j.first_start),
                f(j.finish),
                j.preemptions
            )
        })
        .collect();
    got.sort();
    let mut exp: Vec<String> = expected
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    exp.sort();
    (got.join("\n"), exp.join("\n"))
}

#[test]
fn scenario_files() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 8,
        "scenario files missing from {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for f in &files {
        let (got, exp) = run_scenario(&std::fs::read_to_string(f).unwrap());
        if got != exp {
            failures.push(format!(
                "{}:\n--- expected\n{exp}\n--- got\n{got}",
                f.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn spread_model_slows_multi_node_placements() {
    use apiary_model::SpreadTable;
    use apiary_sim::SpreadModel;
    let mut t = SpreadTable::new("test");
    t.insert("resnet50", 0, 2, 0, 0.5);
    let speed = SpreadModel(t);
    let run = |preset: &str| {
        let mut j = Job::new("a", 0, 2, 100_000);
        j.model = Some("resnet50".into());
        let c = ClusterSpec::preset(preset).unwrap().build().unwrap();
        let mut p = registry::build("fifo", &Params::default()).unwrap();
        let out = apiary_sim::run(
            c,
            vec![j],
            p.as_mut(),
            &speed,
            &Config::default(),
            &mut |_| {},
        )
        .unwrap();
        out.jobs[0].finish.unwrap()
    };
    // Two 1-GPU nodes: the job spans both and runs at half speed.
    assert_eq!(run("n2g1"), 200_000);
    // One 2-GPU node: trace speed.
    assert_eq!(run("n1g2"), 100_000);
}
