//! Every implementation of the engine's extension traits in this crate, through its
//! conformance suite (`apiary_sim::testing`); the live service's backend runs the
//! backend suite in `apiary-server`'s tests.

use apiary_model::{Scaling as Table, SpreadTable};
use apiary_policy::{Params, registry};
use apiary_sim::hooks::MuriOverhead;
use apiary_sim::observe::{ClusterEfficiency, JobCounts, Utilisation};
use apiary_sim::testing::{
    backend_suite, hook_suite, observer_suite, sample_cluster, sample_jobs, throughput_suite,
};
use apiary_sim::throughput::{GpuTypes, Scaling};
use apiary_sim::{CommModel, Config, DurationModel, SimBackend, SpreadModel, Stack};

#[test]
fn every_throughput_model_conforms() {
    let c = sample_cluster();
    let mut jobs = sample_jobs();
    // Per-type speeds and throughput tables for the layers that read them.
    for (k, j) in jobs.iter_mut().enumerate() {
        if k % 3 == 0 {
            j.extras_mut().type_speeds = Some([("a100".to_string(), 1.0)].into());
        }
        if k % 2 == 0 {
            j.extras_mut().scaling = Table::new(vec![(1, 1.0), (2, 1.8), (4, 3.2), (8, 5.4)], 8);
        }
    }
    let mut spread = SpreadTable::new("test");
    spread.insert("resnet50", 0, 2, 0, 0.8);
    spread.insert("vgg16", 0, 8, 0, 0.5);
    let comm = CommModel::new(&c).unwrap();
    let models: [(&str, &dyn apiary_sim::Throughput); 5] = [
        ("duration", &DurationModel),
        ("spread", &SpreadModel(spread)),
        ("comm", &comm),
        ("gpu types", &GpuTypes),
        ("scaling", &Scaling),
    ];
    for (name, m) in models {
        throughput_suite(name, m, &c, &jobs);
        throughput_suite(
            &format!("standard stack over {name}"),
            &Stack::standard(m),
            &c,
            &jobs,
        );
    }
}

#[test]
fn every_observer_conforms() {
    observer_suite("utilisation", &|| Box::new(Utilisation::new(0, 16)));
    observer_suite("job counts", &|| Box::new(JobCounts::new(0)));
    observer_suite("cluster efficiency", &|| {
        Box::new(ClusterEfficiency::new(0, 16))
    });
}

#[test]
fn every_hook_conforms() {
    hook_suite("muri overhead", sample_jobs(), &|w| {
        Box::new(MuriOverhead::new(w))
    });
}

#[test]
fn the_simulated_world_conforms_as_a_backend() {
    for policy in [
        "fifo", "sjf", "srtf", "srsf", "tiresias", "themis", "gandiva", "quota", "hived", "private",
    ] {
        let params = Params::default();
        backend_suite(policy, &|c, jobs| {
            // A backend per run borrows its policy; the test keeps them all.
            let p = Box::leak(registry::build(policy, &params).unwrap());
            SimBackend::new(c.clone(), jobs, p, &Config::default()).unwrap()
        });
    }
}
