//! The two drivers are one loop over two backends: the committed Philly sample run by
//! the engine over the live service's state machine (`apiary simulate --driver live`)
//! gives the simulator's jobs.csv byte for byte, for every policy the service hosts,
//! except where `docs/architecture.md` ("Where the drivers differ") says why not. A
//! debug build runs the sample's first 400 jobs; `.ci/run` compares the whole sample
//! with the release binary.

use apiary_model::ClusterSpec;
use apiary_policy::{BUILTIN, Capability, Params};
use apiary_server::simulated::LiveBackend;
use apiary_sim::{Config, DurationModel, Engine, Stack};

/// Policies whose live runs differ from simulated ones, and why (documented).
const DIFFER: &[(&str, &str)] = &[
    (
        "muri-s",
        "profiles are drawn by job id, and a live job's id is the API's",
    ),
    (
        "muri-l",
        "profiles are drawn by job id, and a live job's id is the API's",
    ),
    (
        "tiresias-gittins",
        "its GPU-time distribution is learned from the jobs in the world at the first pass: \
         the whole trace in the simulator, the jobs submitted so far live",
    ),
];

fn jobs_csv(o: &apiary_model::RunOutcome) -> String {
    let mut buf = Vec::new();
    apiary_report::write_jobs_csv(o, &mut buf).unwrap();
    String::from_utf8(buf).unwrap()
}

#[test]
fn the_live_driver_replays_the_philly_sample_as_the_simulator_does() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/traces/philly-sample.csv");
    let mut trace = apiary_trace::read(&path, &Default::default()).unwrap();
    trace.jobs.truncate(400);
    let cluster = ClusterSpec::preset("n64g8").unwrap().build().unwrap();
    let mut equal = Vec::new();
    for spec in BUILTIN {
        // The elastic ones are served live for --elastic submissions, but the live
        // driver does not replay them (trace jobs are rigid submissions; it says so),
        // nor GoldMiner, SiloD and MuxFlow (the live driver has no CPU, IO or online
        // model to run trace jobs at the speed those give; it says so too).
        if spec.has(Capability::Elastic)
            || apiary_server::simulated::unmodelled(spec.capabilities).is_some()
        {
            continue;
        }
        let params = Params::default();
        let mut jobs = trace.jobs.clone();
        if spec.has(Capability::Profiles) {
            apiary_model::profiles::assign(&mut jobs, 0);
        }
        let mut p = spec.build_checked(&params).unwrap();
        let sim = apiary_sim::run(
            cluster.clone(),
            jobs.clone(),
            p.as_mut(),
            &DurationModel,
            &Config::default(),
            &mut |_| {},
        )
        .unwrap();
        let cfg = Config::default();
        let backend = LiveBackend::new(&cluster, jobs, spec.name, &params, &cfg).unwrap();
        let live = Engine::new(backend, Stack::standard(&DurationModel), &cfg)
            .unwrap()
            .run(&mut |_| {})
            .unwrap();
        assert_eq!(live.events, sim.events, "{}", spec.name);
        let same = jobs_csv(&live) == jobs_csv(&sim);
        // A policy in DIFFER may differ (on this prefix it can happen to agree).
        if !DIFFER.iter().any(|d| d.0 == spec.name) {
            assert!(
                same,
                "{}: the drivers differ on the Philly sample",
                spec.name
            );
            assert_eq!(live.util, sim.util, "{}", spec.name);
            equal.push(spec.name);
        }
    }
    // Seven policies are simulator-only: the elastic ElasticFlow, EDF, Pollux and
    // GreenFlow, SiloD, which allocates cache and bandwidth, GoldMiner, which runs
    // data workers, and MuxFlow, which sets SM shares beside online services.
    assert_eq!(equal.len(), BUILTIN.len() - 7 - DIFFER.len(), "{equal:?}");
    assert!(DIFFER.iter().all(|d| BUILTIN.iter().any(|s| s.name == d.0)));
}
