//! Schedulers for a pool of GPUs shared by several LLM services (SeaLLM's setting):
//! which services each GPU group hosts, and, where a group hosts several, whose
//! iteration runs next.
//!
//! A group is `tp` GPUs that hold the weights of every model placed on it and one KV
//! cache; it runs one model's iteration at a time. The engine dispatches each request
//! to the freest group hosting its service and carries out the policy's choices; a
//! policy decides [`place`](PoolPolicy::place) at the start, from each service's
//! estimated load, [`pick`](PoolPolicy::pick) at every iteration boundary of a group
//! hosting more than one service with work, and, if it re-places, whether the load
//! measured since its last look calls for a new placement
//! ([`replan`](PoolPolicy::replan)).

mod dedicated;
mod seallm;

use crate::workload::Micros;
use apiary_core::{Decl, Params, Registry};

/// A service as placement sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceDemand {
    /// Its name.
    pub name: String,
    /// GPU-seconds of one group it needs per second, estimated from its trace.
    pub load: f64,
}

/// A service with work on a group, as [`PoolPolicy::pick`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubView {
    /// The service.
    pub service: u16,
    /// Requests queued.
    pub waiting: u32,
    /// Requests admitted.
    pub running: u32,
    /// GPU time the newest admitted request has had on this group, µs (`None` when
    /// none runs).
    pub newest_attained: Option<Micros>,
    /// The service's budget: what a typical request takes on an idle group, µs.
    pub budget: Micros,
    /// Time since its last iteration here ended, µs.
    pub idle_for: Micros,
}

/// A scheduler for a shared pool.
pub trait PoolPolicy {
    /// The services each of `groups` groups hosts; every service must be placed
    /// somewhere. `room(set)` is the share of a group's usable memory that the weights
    /// of a set of services leave for KV cache (negative: they do not fit).
    fn place(
        &mut self,
        demand: &[ServiceDemand],
        groups: u32,
        room: &dyn Fn(&[u16]) -> f64,
    ) -> Vec<Vec<u16>>;

    /// Which of `subs` (the services with work on `group`, at least one) runs the
    /// group's next iteration.
    fn pick(&mut self, _group: u32, _subs: &[SubView]) -> usize {
        0
    }

    /// Whether services on one group draw from one KV pool; otherwise each gets a fixed
    /// share in proportion to its load.
    fn unified_kv(&self) -> bool {
        true
    }

    /// How often the engine offers [`replan`](PoolPolicy::replan), µs; `None`: the
    /// placement is fixed.
    fn replan_every(&self) -> Option<Micros> {
        None
    }

    /// At `now`, with `demand` measured over the interval just past (arrivals only,
    /// each costed at its service's mean output), a new placement for the `current`
    /// one, or `None` to keep it. `room` is as for [`place`](PoolPolicy::place) but
    /// negative, too, where a set's KV could not hold a member's longest request.
    fn replan(
        &mut self,
        _now: Micros,
        _demand: &[ServiceDemand],
        _current: &[Vec<u16>],
        _room: &dyn Fn(&[u16]) -> f64,
    ) -> Option<Vec<Vec<u16>>> {
        None
    }
}

/// The highest load on any group of `placement`, each service's load spread evenly
/// over the groups hosting it: what a placement leaves the busiest group.
pub fn peak_load(placement: &[Vec<u16>], demand: &[ServiceDemand]) -> f64 {
    let mut hosts = vec![0u32; demand.len()];
    for &s in placement.iter().flatten() {
        if let Some(h) = hosts.get_mut(s as usize) {
            *h += 1;
        }
    }
    placement
        .iter()
        .map(|set| {
            set.iter()
                .filter_map(|&s| Some(demand.get(s as usize)?.load / f64::from(hosts[s as usize])))
                .sum::<f64>()
        })
        .fold(0.0, f64::max)
}

/// `new`'s sets assigned to groups so that as many groups as possible keep what
/// `current` gives them (each kept group is a model load saved); the rest take the
/// remaining sets in order.
pub fn align(current: &[Vec<u16>], new: Vec<Vec<u16>>) -> Vec<Vec<u16>> {
    let mut left: Vec<Option<Vec<u16>>> = new.into_iter().map(Some).collect();
    let mut out: Vec<Option<Vec<u16>>> = vec![None; current.len().max(left.len())];
    for (g, cur) in current.iter().enumerate() {
        if let Some(i) = left.iter().position(|s| s.as_ref() == Some(cur)) {
            out[g] = left[i].take();
        }
    }
    let mut rest = left.into_iter().flatten();
    for slot in out.iter_mut().filter(|s| s.is_none()) {
        *slot = rest.next();
    }
    out.into_iter().flatten().collect()
}

/// A pool policy's declaration, read by `apiary llm policies` and the builder.
pub type PoolPolicySpec = Decl<dyn PoolPolicy>;

/// The built-in pool policies.
pub const POOL_POLICIES: Registry<PoolPolicySpec> = Registry::new(
    "pool policy",
    "apiary llm policies",
    &[
        dedicated::DEDICATED,
        dedicated::STATIC_PARTITION,
        seallm::SPEC,
    ],
);

/// The pool policy called `name`, built with `params` (unknown keys are errors).
pub fn build(name: &str, params: &Params) -> Result<Box<dyn PoolPolicy>, crate::LlmError> {
    Ok(POOL_POLICIES.build(name, params)?)
}

/// Splits `groups` among services in proportion to `weights`, at least one each when
/// there are enough groups (largest remainder; ties to the lower index).
pub fn split(weights: &[f64], groups: u32) -> Vec<u32> {
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let floor = u32::from(groups >= n as u32);
    let mut out = vec![floor; n];
    let left = groups - floor * n as u32;
    let total: f64 = weights.iter().map(|w| w.max(0.0)).sum();
    let share = |i: usize| {
        if total > 0.0 {
            weights[i].max(0.0) / total * f64::from(left)
        } else {
            f64::from(left) / n as f64
        }
    };
    let mut given = 0;
    for (i, o) in out.iter_mut().enumerate() {
        let whole = share(i).floor() as u32;
        *o += whole;
        given += whole;
    }
    let mut rest: Vec<(f64, usize)> = (0..n).map(|i| (share(i) - share(i).floor(), i)).collect();
    rest.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in rest.iter().take((left - given) as usize) {
        out[i] += 1;
    }
    out
}

/// One service per group, `counts[s]` groups for service `s`, in service order.
fn partition(counts: &[u32]) -> Vec<Vec<u16>> {
    let mut out = Vec::new();
    for (s, &c) in counts.iter().enumerate() {
        for _ in 0..c {
            out.push(vec![s as u16]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_proportional_with_one_each() {
        assert_eq!(split(&[3.0, 1.0], 8), vec![6, 2]);
        assert_eq!(split(&[1.0, 1.0, 1.0], 4), vec![2, 1, 1]);
        assert_eq!(split(&[100.0, 0.0], 4), vec![3, 1]);
        assert_eq!(split(&[1.0, 1.0], 1), vec![1, 0]);
        assert_eq!(split(&[0.0, 0.0], 3), vec![2, 1]);
        for g in 0..20 {
            assert_eq!(split(&[0.7, 2.0, 0.1], g).iter().sum::<u32>(), g);
        }
    }

    #[test]
    fn alignment_keeps_groups_that_need_no_load() {
        let current = vec![vec![0], vec![1], vec![0, 1], vec![2]];
        let new = vec![vec![2], vec![0], vec![0], vec![0, 1]];
        assert_eq!(
            align(&current, new),
            vec![vec![0], vec![0], vec![0, 1], vec![2]]
        );
    }

    #[test]
    fn peak_load_spreads_a_service_over_its_hosts() {
        let d = |load| ServiceDemand {
            name: String::new(),
            load,
        };
        let demand = [d(2.0), d(1.0)];
        assert_eq!(peak_load(&[vec![0], vec![0, 1]], &demand), 2.0);
        assert_eq!(peak_load(&[vec![0], vec![0], vec![1]], &demand), 1.0);
    }
}
