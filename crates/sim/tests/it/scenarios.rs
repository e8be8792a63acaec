//! Runs every `testdata/scenarios/*.txt`: a small command language above `----`, the
//! expected output below (raft-rs style): with `steps`, the jobs running and pending
//! after each time stamp the engine handled, in order; then each job's outcome (in any
//! order). `APIARY_REWRITE=1 cargo test -p apiary-sim --test it scenario_files`
//! rewrites the expectations with what the engine gives (read the diff before
//! committing it).
//!
//! ```text
//! cluster n1g4            (several presets join: `cluster n1g1-v100 n1g2-k80`)
//! policy fifo backfill=true
//! mode slot:60            (optional)
//! restart_overhead 5      (optional, seconds)
//! steps                   (optional: expect the state after every time stamp)
//! job a submit=0 gpus=2 duration=10   (optional vc=NAME; stages=DATA/GPU/NET ms with
//!                                       iters=N for Muri's interleaving;
//!                                       speeds=v100:1,k80:0.5 per GPU type;
//!                                       deadline=SECONDS; scaling=1:1,2:1.8 (GPUs:
//!                                       iterations/s) with max=GPUS and batch=N for
//!                                       elastic jobs, which run `duration` at `gpus`,
//!                                       and iters=N, the trace's iteration count)
//! ----
//! t=0 running=a pending=-
//! t=10 running=- pending=-
//! a start=0 finish=10 preemptions=0
//! ```
//!
//! A job whose deadline the policy judges elsewhere than at its finish (ElasticFlow's
//! `progress=artifact`) adds `judged=SECONDS met=BOOL`.

use apiary_model::{ClusterSpec, Job};
use apiary_policy::{Params, Status, World, registry};
use apiary_sim::{Config, DurationModel, Engine, Mode, Stack};
use std::path::PathBuf;

fn secs(v: &str) -> u64 {
    (v.parse::<f64>().expect("number") * 1000.0).round() as u64
}

/// The jobs in `status` after a step, by id, or `-`.
fn ids(w: &World, status: Status) -> String {
    let mut v: Vec<&str> = (0..w.jobs.len())
        .filter(|&k| w.rt[k].status == status)
        .map(|k| w.jobs[k].id.as_str())
        .collect();
    v.sort_unstable();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

/// Seconds as the scenario files write them.
fn show(t: u64) -> String {
    format!("{}", t as f64 / 1000.0)
}

/// What a scenario gives and what its file expects, each as (steps in order, job
/// lines sorted), and the output to write back in rewrite mode.
struct Compared {
    got: (Vec<String>, Vec<String>),
    expected: (Vec<String>, Vec<String>),
    rewritten: String,
}

fn run_scenario(text: &str) -> Compared {
    let (input, expected) = text
        .split_once("\n----\n")
        .expect("scenario needs a ---- line");
    let mut steps = false;
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
            "steps" => steps = true,
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
                j.vc = kv.get("vc").map(|v| (*v).into());
                if let Some(sp) = kv.get("speeds") {
                    j.extras_mut().type_speeds = Some(
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
                    j.extras_mut().scaling = Some(table);
                }
                if let Some(p) = kv.get("priority") {
                    j.priority = p.parse().unwrap();
                }
                if let Some(st) = kv.get("stages") {
                    let v: Vec<f64> = st.split('/').map(|x| x.parse().unwrap()).collect();
                    j.extras_mut().stages = Some(apiary_model::StageTimes {
                        data: v[0],
                        gpu: v[1],
                        net: v[2],
                    });
                }
                // Muri's stages need it; an elastic job may give it, as ElasticFlow's
                // traces do (its run time is then the reader's rounded `duration`).
                if let Some(n) = kv.get("iters") {
                    j.iterations = Some(n.parse().unwrap());
                }
                jobs.push(j);
            }
            other => panic!("unknown command {other}"),
        }
    }
    jobs.sort_by_key(|j| j.submit);
    let mut p = policy.expect("policy line");
    let mut engine = Engine::new(
        cluster.expect("cluster line"),
        jobs,
        p.as_mut(),
        Stack::standard(&DurationModel),
        &cfg,
    )
    .unwrap();
    let mut got_steps = Vec::new();
    while let Some(now) = engine.step().unwrap() {
        if steps {
            let w = engine.world();
            got_steps.push(format!(
                "t={} running={} pending={}",
                show(now),
                ids(w, Status::Running),
                ids(w, Status::Pending)
            ));
        }
    }
    let out = engine.outcome();
    let got_jobs: Vec<String> = out
        .jobs
        .iter()
        .map(|j| {
            if j.rejected.is_some() {
                return format!("{} rejected", j.id);
            }
            let f = |t: Option<u64>| t.map_or("-".to_string(), show);
            // Where the policy judges a deadline elsewhere than at the finish.
            let judged = j.judged.map_or(String::new(), |t| {
                format!(" judged={} met={}", show(t), j.met_deadline())
            });
            format!(
                "{} start={} finish={} preemptions={}{judged}",
                j.id,
                f(j.first_start),
                f(j.finish),
                j.preemptions
            )
        })
        .collect();
    let rewritten = format!(
        "{input}\n----\n{}\n",
        got_steps
            .iter()
            .chain(&got_jobs)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let (exp_steps, mut exp_jobs): (Vec<String>, Vec<String>) = expected
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .partition(|l| l.starts_with("t="));
    exp_jobs.sort();
    let mut got_jobs = got_jobs;
    got_jobs.sort();
    Compared {
        got: (got_steps, got_jobs),
        expected: (exp_steps, exp_jobs),
        rewritten,
    }
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
    let rewrite = std::env::var_os("APIARY_REWRITE").is_some();
    let mut failures = Vec::new();
    for f in &files {
        let c = run_scenario(&std::fs::read_to_string(f).unwrap());
        if c.got == c.expected {
            continue;
        }
        if rewrite {
            std::fs::write(f, &c.rewritten).unwrap();
            continue;
        }
        let show = |(s, j): &(Vec<String>, Vec<String>)| {
            s.iter().chain(j).cloned().collect::<Vec<_>>().join("\n")
        };
        failures.push(format!(
            "{}:\n--- expected\n{}\n--- got\n{}",
            f.display(),
            show(&c.expected),
            show(&c.got)
        ));
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
