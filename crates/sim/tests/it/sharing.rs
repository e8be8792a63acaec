//! Jobs sharing GPUs as a group (Muri) and policy speed factors, through the engine.

use apiary_model::{ClusterSpec, Job};
use apiary_policy::{
    Capabilities, Capability, Ctx, Handles, PlacementStrategy, Policy, PolicyError, PolicySpec,
    Status,
};
use apiary_sim::{Config, DurationModel};

/// Starts the first two jobs as one group at half speed each; at t = 4 s sets job 2
/// (alone) to half speed.
struct Pair {
    done: bool,
    slowed: bool,
}

const PAIR: PolicySpec = PolicySpec {
    name: "pair",
    about: "a test: one group, then speed factors",
    capabilities: Capabilities::of(&[Capability::SharedGpus, Capability::SpeedFactors]),
    params: &[],
    build: |_| {
        Ok(Box::new(Pair {
            done: false,
            slowed: false,
        }))
    },
};

impl Policy for Pair {
    fn spec(&self) -> &'static PolicySpec {
        &PAIR
    }
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        if !self.done && ctx.status(0) == Status::Pending && ctx.status(1) == Status::Pending {
            let mut groups = ctx.groups()?;
            assert!(groups.start_group(&[0, 1], PlacementStrategy::Consolidated));
            assert_eq!(groups.sharing_count(1), 2);
            assert_eq!(groups.share_group(1), Some(0));
            let mut speeds = ctx.speeds()?;
            speeds.set_speed(0, 0.5);
            speeds.set_speed(1, 0.5);
            // Four GPUs are held once.
            assert_eq!(ctx.free_gpus(), 4);
            self.done = true;
        }
        if ctx.status(2) == Status::Pending {
            ctx.start_with(2, PlacementStrategy::Consolidated);
            ctx.wake_at(4_000);
        } else if ctx.now() >= 4_000 && !self.slowed {
            ctx.speeds()?.set_speed(2, 0.5);
            self.slowed = true;
        }
        Ok(())
    }
}

#[test]
fn a_group_shares_its_gpus_and_speed_factors_stretch_runs() {
    let cluster = ClusterSpec::preset("n2g4").unwrap().build().unwrap();
    let jobs = vec![
        Job::new("a", 0, 4, 10_000),
        Job::new("b", 0, 4, 10_000),
        Job::new("c", 0, 4, 10_000),
    ];
    let out = apiary_sim::run(
        cluster,
        jobs,
        &mut Pair {
            done: false,
            slowed: false,
        },
        &DurationModel,
        &Config::default(),
        &mut |_| {},
    )
    .unwrap();
    let fin: Vec<u64> = out.jobs.iter().map(|j| j.finish.unwrap()).collect();
    // The pair runs at half speed: 20 s each. Job c: 4 s at full speed, the other 6 s
    // of work at half speed (12 s): done at 16 s.
    assert_eq!(fin, vec![20_000, 20_000, 16_000]);
    // Utilisation counts the shared GPUs once: 8 GPUs busy until 16 s, then 4.
    let busy = out.util.total_busy();
    assert!(
        (busy - (8.0 * 16_000.0 + 4.0 * 4_000.0)).abs() < 1.0,
        "{busy}"
    );
}

/// Starts a group without declaring `shared-gpus`.
struct Sneaky;

const SNEAKY: PolicySpec = PolicySpec {
    name: "sneaky",
    about: "a test: shares GPUs without declaring it",
    capabilities: Capabilities::CORE,
    params: &[],
    build: |_| Ok(Box::new(Sneaky)),
};

impl Policy for Sneaky {
    fn spec(&self) -> &'static PolicySpec {
        &SNEAKY
    }
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        ctx.groups()?
            .start_group(&[0, 1], PlacementStrategy::Consolidated);
        unreachable!("the group mechanism opens only when declared")
    }
}

#[test]
fn an_undeclared_capability_stops_the_run_naming_it() {
    let cluster = ClusterSpec::preset("n2g4").unwrap().build().unwrap();
    let jobs = vec![Job::new("a", 0, 4, 1_000), Job::new("b", 0, 4, 1_000)];
    let e = apiary_sim::run(
        cluster,
        jobs,
        &mut Sneaky,
        &DurationModel,
        &Config::default(),
        &mut |_| {},
    )
    .unwrap_err();
    match e {
        apiary_sim::SimError::Policy(PolicyError::Undeclared { policy, capability }) => {
            assert_eq!((policy, capability), ("sneaky", Capability::SharedGpus));
        }
        other => panic!("{other}"),
    }
}
