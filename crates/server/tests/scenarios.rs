//! The scenario files of `testdata/scenarios` on the live backend: every file whose
//! policy the service hosts, and whose jobs carry only what a submission carries, runs
//! through the engine over the live service's state machine (`LiveBackend`) and must
//! show what the file expects, step by step where it lists steps. The simulator's
//! tests run the same files over the simulated world, so a scenario is one
//! conformance case for both backends. The live backend also runs the backend
//! conformance suite (`apiary_sim::testing::backend_suite`).

use apiary_policy::{Capability, registry};
use apiary_server::simulated::LiveBackend;
use apiary_sim::scenario::Scenario;
use apiary_sim::{DurationModel, Engine, Stack};
use std::path::PathBuf;

/// Why the live backend cannot run `s` as the file writes it, if it cannot.
fn not_live(s: &Scenario) -> Option<String> {
    let p = registry::build(&s.policy, &s.params).ok()?;
    let caps = p.capabilities();
    if let Some((what, _)) = apiary_server::simulated::unmodelled(caps) {
        return Some(format!("the live driver does not model {what}"));
    }
    if caps.has(Capability::Lookahead) {
        return Some("it reads the jobs to come, which a live world does not hold".into());
    }
    if s.cfg.io.is_some() || s.cfg.cpu.is_some() || s.cfg.online.is_some() {
        return Some(
            "it models data loading or online services, which live jobs meet by themselves".into(),
        );
    }
    let data = s.jobs.iter().find(|j| {
        let x = j.extras();
        x.stages.is_some() || x.type_speeds.is_some() || x.scaling.is_some()
    });
    data.map(|j| {
        format!(
            "job {} carries stage times, per-type speeds or a throughput table, which a \
             submission does not",
            j.id
        )
    })
}

#[test]
fn scenario_files_on_the_live_backend() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/scenarios");
    let files = apiary_sim::scenario::files(&dir).unwrap();
    let (mut ran, mut skipped, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let s = Scenario::parse(&std::fs::read_to_string(f).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(why) = not_live(&s) {
            skipped.push(format!("{name}: {why}"));
            continue;
        }
        let live = LiveBackend::new(&s.cluster, s.jobs.clone(), &s.policy, &s.params, &s.cfg)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let engine = Engine::new(live, Stack::standard(&DurationModel), &s.cfg).unwrap();
        let got = s.run(engine).unwrap();
        if !got.matches(&s.expected) {
            failures.push(format!(
                "{name}:\n--- expected\n{}--- live\n{got}",
                s.expected
            ));
        }
        ran.push(name);
    }
    eprintln!("ran live: {ran:?}\nskipped: {skipped:#?}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Most files are plain enough for the service; the rest say why not.
    assert!(
        ran.len() >= 15,
        "only {} scenarios ran live: {ran:?}; skipped: {skipped:#?}",
        ran.len()
    );
}

/// The live service behind simulated agents keeps what every backend keeps
/// (`apiary_sim::testing::backend_suite`), under every plain policy and every way of
/// sharing.
#[test]
fn the_live_service_conforms_as_a_backend() {
    for policy in [
        "fifo", "sjf", "srtf", "srsf", "tiresias", "themis", "gandiva", "quota", "hived", "private",
    ] {
        apiary_sim::testing::backend_suite(&format!("live {policy}"), &|c, jobs| {
            let cfg = apiary_sim::Config::default();
            LiveBackend::new(c, jobs, policy, &Default::default(), &cfg)
                .unwrap_or_else(|e| panic!("{policy}: {e}"))
        });
    }
}
