//! The two baselines SeaLLM compares with that do not share GPUs: `dedicated` gives
//! every service the same number of groups (one deployment per model, as clusters run
//! vLLM), `static-partition` sizes each service's groups by its estimated load, once,
//! as an offline planner would. Neither co-locates models.

use super::{PoolPolicy, PoolPolicySpec, ServiceDemand, partition, split};
use apiary_core::params::{ParamError, Params};

/// Equal groups per service.
pub const DEDICATED: PoolPolicySpec = PoolPolicySpec {
    name: "dedicated",
    about: "each service on its own groups, the same number for every service",
    params: &[],
    build: |_| Ok(Box::new(Partition { by_load: false })),
};

/// Groups per service in proportion to load.
pub const STATIC_PARTITION: PoolPolicySpec = PoolPolicySpec {
    name: "static-partition",
    about: "each service on its own groups, as many as its estimated load's share of the pool",
    params: &[],
    build: build_static,
};

fn build_static(_: &Params) -> Result<Box<dyn PoolPolicy>, ParamError> {
    Ok(Box::new(Partition { by_load: true }))
}

struct Partition {
    by_load: bool,
}

impl PoolPolicy for Partition {
    fn place(
        &mut self,
        demand: &[ServiceDemand],
        groups: u32,
        _room: &dyn Fn(&[u16]) -> f64,
    ) -> Vec<Vec<u16>> {
        let weights: Vec<f64> = demand
            .iter()
            .map(|d| if self.by_load { d.load } else { 1.0 })
            .collect();
        partition(&split(&weights, groups))
    }
}
