//! Runs every `testdata/scenarios/*.txt` ([`apiary_sim::scenario`] has the format)
//! through the simulator. `APIARY_REWRITE=1 cargo test -p apiary-sim --test it
//! scenario_files` rewrites the expectations with what the engine gives (read the diff
//! before committing it).

use apiary_model::{ClusterSpec, Job};
use apiary_policy::{Params, registry};
use apiary_sim::scenario::Scenario;
use apiary_sim::{Config, DurationModel, Engine, Stack};
use std::path::PathBuf;

#[test]
fn scenario_files() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/scenarios");
    let files = apiary_sim::scenario::files(&dir).unwrap();
    assert!(
        files.len() >= 8,
        "scenario files missing from {}",
        dir.display()
    );
    let rewrite = std::env::var_os("APIARY_REWRITE").is_some();
    let mut failures = Vec::new();
    for f in &files {
        let s = Scenario::parse(&std::fs::read_to_string(f).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let mut p = registry::build(&s.policy, &s.params).unwrap();
        let engine = Engine::sim(
            s.cluster.clone(),
            s.jobs.clone(),
            p.as_mut(),
            Stack::standard(&DurationModel),
            &s.cfg,
        )
        .unwrap();
        let got = s.run(engine).unwrap();
        if got.matches(&s.expected) {
            continue;
        }
        if rewrite {
            std::fs::write(f, s.rewritten(&got)).unwrap();
            continue;
        }
        failures.push(format!(
            "{}:\n--- expected\n{}--- got\n{}",
            f.display(),
            s.expected,
            got
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
