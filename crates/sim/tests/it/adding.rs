//! The worked example of `docs/architecture.md` ("Adding a policy"), compiled and run:
//! a policy outside the crate that declares only the core contract.

use apiary_model::{ClusterSpec, Job};
use apiary_policy::fifo::placement_param;
use apiary_policy::spec::{Capabilities, PLACE_CONS, PolicySpec};
use apiary_policy::{Ctx, JobIdx, PlacementStrategy, Policy, PolicyError, Status};
use apiary_sim::{Config, DurationModel};

pub const FEWEST: PolicySpec = PolicySpec {
    name: "fewest",
    about: "fewest GPUs first; non-preemptive",
    capabilities: Capabilities::CORE, // starts only through the placement
    params: &[PLACE_CONS],
    build: |p| {
        Ok(Box::new(Fewest {
            queue: Vec::new(),
            strategy: placement_param(p, &PLACE_CONS)?,
        }))
    },
};

pub struct Fewest {
    queue: Vec<JobIdx>,
    strategy: PlacementStrategy,
}

impl Policy for Fewest {
    fn spec(&self) -> &'static PolicySpec {
        &FEWEST
    }
    fn admit(&mut self, _ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        self.queue.push(j);
        Ok(())
    }
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        self.queue.retain(|&j| ctx.status(j) == Status::Pending);
        self.queue.sort_by_key(|&j| (ctx.job(j).gpus, j));
        for k in 0..self.queue.len() {
            ctx.start_with(self.queue[k], self.strategy);
        }
        Ok(())
    }
}

#[test]
fn the_worked_example_runs_smallest_first() {
    let cluster = ClusterSpec::preset("n1g4").unwrap().build().unwrap();
    // All at t = 0 on 4 GPUs: the 1-GPU jobs go first, the 4-GPU job after them.
    let jobs = vec![
        Job::new("big", 0, 4, 10_000),
        Job::new("a", 0, 1, 5_000),
        Job::new("b", 0, 2, 3_000),
    ];
    let mut p = (FEWEST.build_checked(&Default::default())).unwrap();
    let out = apiary_sim::run(
        cluster,
        jobs,
        p.as_mut(),
        &DurationModel,
        &Config::default(),
        &mut |_| {},
    )
    .unwrap();
    let start: Vec<u64> = out.jobs.iter().map(|j| j.first_start.unwrap()).collect();
    assert_eq!(start, vec![5_000, 0, 0]);
}
