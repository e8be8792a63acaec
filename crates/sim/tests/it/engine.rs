//! The engine's parts from outside the crate: stepping one time stamp at a time, a
//! hook, an observer and a throughput layer added by a caller, as a new system would
//! add them.

use apiary_model::{Cluster, ClusterSpec, Job, Placement, RunOutcome, Time};
use apiary_policy::{JobIdx, Policy, Status, World, registry};
use apiary_sim::hooks::Hook;
use apiary_sim::observe::Observer;
use apiary_sim::throughput::RateError;
use apiary_sim::{Config, DurationModel, Engine, Stack, Throughput};
use std::cell::Cell;

fn cluster() -> Cluster {
    ClusterSpec::preset("n1g4").unwrap().build().unwrap()
}

fn fifo() -> Box<dyn Policy> {
    registry::build("fifo", &Default::default()).unwrap()
}

/// Two jobs on 4 GPUs: `a` holds all of them until 5 s; `b` waits for it.
fn jobs() -> Vec<Job> {
    vec![Job::new("a", 0, 4, 5_000), Job::new("b", 1_000, 2, 3_000)]
}

/// `p` on the test cluster with the standard rate stack.
fn engine(p: &mut dyn Policy, trace: Vec<Job>) -> Engine<'_> {
    Engine::sim(
        cluster(),
        trace,
        p,
        Stack::standard(&DurationModel),
        &Config::default(),
    )
    .unwrap()
}

#[test]
fn step_handles_one_time_stamp_at_a_time() {
    let mut p = fifo();
    let mut e = engine(p.as_mut(), jobs());
    let mut seen = Vec::new();
    while let Some(now) = e.step().unwrap() {
        let w = e.world();
        seen.push((now, w.rt[0].status, w.rt[1].status));
    }
    assert_eq!(
        seen,
        [
            (0, Status::Running, Status::Future),
            (1_000, Status::Running, Status::Pending),
            (5_000, Status::Finished, Status::Running),
            (8_000, Status::Finished, Status::Finished),
        ]
    );
    let p = e.progress();
    assert_eq!((p.finished, p.total, p.events), (2, 2, 4));
    let out = e.outcome();
    assert_eq!(out.jobs[1].first_start, Some(5_000));
    assert_eq!(out.jobs[1].finish, Some(8_000));
}

/// Charges every running job a fixed second at every time stamp after the first.
struct Toll(Time);

impl Hook for Toll {
    fn advanced(&mut self, world: &mut World, prev: Time, now: Time, touched: &mut Vec<JobIdx>) {
        if now <= prev {
            return;
        }
        for k in 0..world.running().len() {
            let j = world.running()[k];
            world.sync(j);
            let rt = &mut world.rt[j as usize];
            rt.remaining += self.0 as f64 * rt.rate;
            touched.push(j);
        }
    }
}

#[test]
fn a_hook_changes_remaining_work_and_the_engine_reschedules() {
    let mut p = fifo();
    let mut trace = jobs();
    trace.push(Job::new("c", 2_000, 2, 4_000));
    let mut e = engine(p.as_mut(), trace);
    e.hook(Box::new(Toll(1_000)));
    let out = e.run(&mut |_| {}).unwrap();
    // `a` pays at the arrivals of b and c (1 s, 2 s), so it ends at 7 s, not 5 s; b
    // and c start then side by side; c pays at b's end (10 s), so it ends at 12 s.
    let ends: Vec<_> = out.jobs.iter().map(|j| (j.first_start, j.finish)).collect();
    assert_eq!(
        ends,
        [
            (Some(0), Some(7_000)),
            (Some(7_000), Some(10_000)),
            (Some(7_000), Some(12_000))
        ]
    );
}

/// Busy GPU-ms summed over the intervals the engine reports, kept by the caller.
struct GpuTime<'a>(&'a Cell<u64>);

impl Observer for GpuTime<'_> {
    fn interval(&mut self, world: &World, from: Time, to: Time) {
        self.0.set(self.0.get() + world.busy_gpus() * (to - from));
    }
    fn report(self: Box<Self>, _: &mut RunOutcome) {}
}

#[test]
fn an_observer_sees_every_interval_once() {
    let mut p = fifo();
    let mut e = engine(p.as_mut(), jobs());
    let measured = Cell::new(0);
    e.observe(Box::new(GpuTime(&measured)));
    let out = e.run(&mut |_| {}).unwrap();
    let held: u64 = out.jobs.iter().map(|j| j.gpu_time).sum();
    assert_eq!(held, 4 * 5_000 + 2 * 3_000);
    assert_eq!(measured.get(), held);
    // The standard utilisation observer still reported.
    let busy: f64 = out.util.busy.iter().sum();
    assert_eq!(busy, held as f64);
}

/// Half speed on every placement.
struct Half;

impl Throughput for Half {
    fn rate(&self, _: &Job, _: &Placement, _: &Cluster) -> Result<f64, RateError> {
        Ok(0.5)
    }
}

/// FIFO on the test cluster with `layer` on top of the standard rate stack.
fn run_with_layer(
    layer: &dyn Throughput,
) -> Result<apiary_model::RunOutcome, apiary_sim::SimError> {
    let mut p = fifo();
    let mut rates = Stack::standard(&DurationModel);
    rates.push(layer);
    Engine::sim(cluster(), jobs(), p.as_mut(), rates, &Config::default())
        .unwrap()
        .run(&mut |_| {})
}

#[test]
fn a_throughput_layer_multiplies_into_every_rate() {
    let out = run_with_layer(&Half).unwrap();
    assert_eq!(out.jobs[0].finish, Some(10_000));
    assert_eq!(out.jobs[1].finish, Some(16_000));
}

/// Fails on placements wider than one GPU.
struct Narrow;

impl Throughput for Narrow {
    fn rate(&self, _: &Job, p: &Placement, _: &Cluster) -> Result<f64, RateError> {
        if p.gpus() > 1 {
            return Err(RateError::Other("no price for a gang".into()));
        }
        Ok(1.0)
    }
}

#[test]
fn a_layer_that_cannot_price_a_placement_stops_the_run_naming_the_job() {
    let e = run_with_layer(&Narrow).unwrap_err();
    assert_eq!(e.to_string(), "job a: no price for a gang");
}
