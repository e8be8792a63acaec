//! Conformance suites for the engine's extension traits, in the manner of openraft's
//! store suite: what every [`Throughput`] model, [`Observer`], [`Hook`] and
//! [`Backend`] must keep whatever it computes. Each implementation's tests call its
//! suite (the live service's backend from `apiary-server`'s tests); a new
//! implementation does the same. The suites panic, naming the implementation and the
//! case, on a violation.

use crate::DurationModel;
use crate::backend::Backend;
use crate::config::Config;
use crate::engine::Engine;
use crate::hooks::Hook;
use crate::observe::Observer;
use crate::throughput::{Stack, Throughput};
use apiary_model::{Cluster, ClusterSpec, Job, Placement, RunOutcome, Time};
use apiary_policy::placement::{self, PlacementStrategy};
use apiary_policy::{JobIdx, Status, World};

/// A small cluster of two switches, and jobs of assorted sizes and models, some with
/// stage times, per-type speeds and throughput tables.
pub fn sample_cluster() -> Cluster {
    ClusterSpec::preset("n4g4-A100")
        .and_then(|s| s.build())
        .expect("preset")
}

/// Jobs of 1 to 8 GPUs on the models the speed tables know and one they do not,
/// submitted over a minute.
pub fn sample_jobs() -> Vec<Job> {
    let models = ["resnet50", "vgg16", "bert", "no-such-model"];
    (0..16u32)
        .map(|k| {
            let mut j = Job::new(
                format!("j{k}"),
                u64::from(k) * 4_000,
                [1, 2, 4, 8][k as usize % 4],
                60_000 + u64::from(k) * 7_000,
            );
            j.model = Some(models[k as usize % models.len()].to_string());
            j.batch_size = Some(32);
            j
        })
        .collect()
}

/// Checks `model` (called `name`): on every job of `jobs` and every placement the
/// standard strategies find on an empty `cluster`, the rate is a finite positive number
/// or a typed error, and asking twice gives the same answer.
pub fn throughput_suite(name: &str, model: &dyn Throughput, cluster: &Cluster, jobs: &[Job]) {
    let state = apiary_model::ClusterState::new(cluster);
    for j in jobs {
        for strategy in [
            PlacementStrategy::Consolidated,
            PlacementStrategy::Counting,
            PlacementStrategy::BestFit,
        ] {
            let mut p = Placement::default();
            if !placement::place(cluster, &state, j.gpus, strategy, &mut p) {
                continue;
            }
            let first = model.rate(j, &p, cluster);
            if let Ok(r) = &first {
                assert!(
                    r.is_finite() && *r > 0.0,
                    "{name}: job {} on {:?} runs at {r}",
                    j.id,
                    p.parts
                );
            }
            let again = model.rate(j, &p, cluster);
            assert_eq!(
                format!("{first:?}"),
                format!("{again:?}"),
                "{name}: job {} priced twice, two answers",
                j.id
            );
        }
    }
}

/// A world on `cluster` with `jobs` and some of them running, for the observer and hook
/// suites.
fn busy_world(cluster: &Cluster, jobs: Vec<Job>) -> World {
    let mut w = World::new(cluster.clone(), jobs);
    for i in 0..w.jobs.len() as JobIdx {
        w.submit(i);
        let mut p = Placement::default();
        if w.place(i, PlacementStrategy::Consolidated, &mut p) {
            w.start(i, p);
            w.rt[i as usize].rate = 1.0;
        }
    }
    w
}

/// The outcome an observer writes into, empty.
fn blank(total_gpus: u32) -> RunOutcome {
    RunOutcome::of_jobs("", total_gpus, Vec::new())
}

/// Checks observers that `make` builds (called `name`): what one reports over
/// `[0, c)` seen in one interval equals what another reports over the same span seen
/// in pieces, an empty interval changes nothing, and two built alike report alike.
pub fn observer_suite(name: &str, make: &dyn Fn() -> Box<dyn Observer>) {
    let cluster = sample_cluster();
    let w = busy_world(&cluster, sample_jobs());
    let report = |cuts: &[Time]| {
        let mut o = make();
        for pair in cuts.windows(2) {
            o.interval(&w, pair[0], pair[1]);
            o.interval(&w, pair[1], pair[1]);
        }
        let mut out = blank(cluster.total_gpus);
        o.report(&mut out);
        format!(
            "{:?} {:?} {:?}",
            out.util, out.cluster_efficiency, out.occupancy
        )
    };
    let whole = report(&[0, 600_000]);
    assert_eq!(
        whole,
        report(&[0, 1, 250_000, 250_001, 600_000]),
        "{name}: one interval and its pieces report differently"
    );
    assert_eq!(
        whole,
        report(&[0, 600_000]),
        "{name}: two built alike differ"
    );
}

/// Checks a hook that `make` builds for a world (called `name`): it names only running
/// jobs; a job it does not name still completes when the engine scheduled it (the
/// engine reschedules only the jobs named); one it names completes no earlier (a hook
/// charges work, it never gives any back); and nothing changes while time stands still.
pub fn hook_suite(name: &str, jobs: Vec<Job>, make: &dyn Fn(&World) -> Box<dyn Hook>) {
    let cluster = sample_cluster();
    let mut w = busy_world(&cluster, jobs);
    let mut h = make(&w);
    let mut touched = Vec::new();
    h.advanced(&mut w, 0, 0, &mut touched);
    assert!(
        touched.is_empty(),
        "{name}: changed jobs while time stood still"
    );
    let mut prev = 0;
    for now in [5_000, 12_000, 30_000] {
        let finish: Vec<Time> = (0..w.jobs.len() as JobIdx)
            .map(|j| match w.rt[j as usize].status {
                Status::Running => w.finish_time(j),
                _ => 0,
            })
            .collect();
        w.now = now;
        touched.clear();
        h.advanced(&mut w, prev, now, &mut touched);
        for j in 0..w.jobs.len() as JobIdx {
            if w.rt[j as usize].status != Status::Running {
                assert!(
                    !touched.contains(&j),
                    "{name}: named job {j}, which does not run"
                );
                continue;
            }
            let after = w.finish_time(j);
            if touched.contains(&j) {
                assert!(
                    after >= finish[j as usize],
                    "{name}: job {j} completes earlier"
                );
            } else {
                assert_eq!(
                    after, finish[j as usize],
                    "{name}: job {j} moved but not named"
                );
            }
        }
        prev = now;
    }
}

/// Checks a backend that `make` builds for a trace (called `name`) under the engine:
/// on [`sample_jobs`] and [`sample_cluster`], at trace speed, every job that arrives
/// finishes, no earlier than its duration after its first start allows; every GPU is
/// free at the end; the outcome lists the trace's jobs in order; and two runs agree.
pub fn backend_suite<B: Backend>(name: &str, make: &dyn Fn(&Cluster, Vec<Job>) -> B) {
    let cluster = sample_cluster();
    let cfg = Config::default();
    let run = || -> (RunOutcome, u64) {
        let b = make(&cluster, sample_jobs());
        let mut engine = Engine::new(b, Stack::standard(&DurationModel), &cfg)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        while engine
            .step()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .is_some()
        {
            let w = engine.world();
            assert!(
                w.busy_gpus() <= u64::from(w.cluster.total_gpus),
                "{name}: more GPUs busy than there are"
            );
        }
        let busy = engine.world().busy_gpus();
        (engine.outcome(), busy)
    };
    let (out, busy) = run();
    assert_eq!(busy, 0, "{name}: GPUs still held at the end");
    let trace = sample_jobs();
    assert_eq!(out.jobs.len(), trace.len(), "{name}: jobs lost or added");
    for (o, j) in out.jobs.iter().zip(&trace) {
        assert_eq!(o.id, j.id, "{name}: outcome out of trace order");
        if o.rejected.is_some() {
            continue;
        }
        let (Some(s), Some(f)) = (o.first_start, o.finish) else {
            panic!("{name}: job {} never finished", j.id);
        };
        assert!(
            s >= j.submit,
            "{name}: job {} started before it arrived",
            j.id
        );
        assert!(
            f >= s + j.duration,
            "{name}: job {} ran faster than its trace",
            j.id
        );
    }
    let (again, _) = run();
    assert_eq!(
        format!("{:?}", out.jobs),
        format!("{:?}", again.jobs),
        "{name}: two runs differ"
    );
}
