//! SeaLLM (Zhao et al., arXiv 2504.15720): several LLM services share the pool. Each
//! group hosts the service the load-proportional split gives it and as many others as
//! fit beside it (their weights leaving at least `min_kv_share` of the memory for KV);
//! co-located services draw from one KV pool; at each iteration boundary the group
//! runs the service whose most urgent request has the least budget left.
//!
//! The budget rule is SeaLLM's doubling budget: a request starts with its service's
//! budget (what a typical request takes on an idle group, from the service's profile);
//! each time the GPU time it has had exceeds the budget, it drops a level and its
//! budget doubles, so requests that outgrow their profile yield to fresh ones. Within a
//! level, the least budget left goes first. A service that has waited `max_wait_ms`
//! for a turn goes first regardless, so a busy neighbour cannot starve it. The code of
//! SeaLLM is not public: the two-stage placement and the starvation guard are our
//! reconstruction of what its paper describes, and placement is decided once, at the
//! start, from each service's trace (no adaptive re-placement yet).

use super::{PoolPolicy, PoolPolicySpec, ServiceDemand, SubView, split};
use crate::workload::Micros;
use apiary_policy::{ParamError, ParamSpec, Params};

const SCHED: ParamSpec = ParamSpec {
    key: "sched",
    default: "db",
    about: "which co-located service runs next: db (doubling budget) | rr (take turns)",
};
const UNIFIED: ParamSpec = ParamSpec {
    key: "unified_kv",
    default: "true",
    about: "co-located services share one KV pool (false: fixed shares by load)",
};
const MIN_KV: ParamSpec = ParamSpec {
    key: "min_kv_share",
    default: "0.3",
    about: "share of a group's memory that must stay for KV when another model joins it",
};
const MAX_WAIT: ParamSpec = ParamSpec {
    key: "max_wait_ms",
    default: "1000",
    about: "a service with work that has not run on a group for this long runs next",
};

/// The spec.
pub const SPEC: PoolPolicySpec = PoolPolicySpec {
    name: "seallm",
    about: "co-locate services on shared groups with one KV pool; the doubling-budget rule \
            picks whose iteration runs next",
    params: &[SCHED, UNIFIED, MIN_KV, MAX_WAIT],
    build,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sched {
    DoublingBudget,
    Turns,
}

fn build(p: &Params) -> Result<Box<dyn PoolPolicy>, ParamError> {
    let min_kv = p.f64(&MIN_KV)?;
    if !(0.0..1.0).contains(&min_kv) {
        return Err(ParamError::Bad {
            key: MIN_KV.key.into(),
            value: min_kv.to_string(),
            message: "expected a share in [0, 1)".into(),
        });
    }
    Ok(Box::new(SeaLlm {
        sched: p.choice(
            &SCHED,
            &[("db", Sched::DoublingBudget), ("rr", Sched::Turns)],
        )?,
        unified: p.bool(&UNIFIED)?,
        min_kv,
        max_wait: (p.f64(&MAX_WAIT)?.max(0.0) * 1e3).round() as Micros,
        last: Vec::new(),
    }))
}

struct SeaLlm {
    sched: Sched,
    unified: bool,
    min_kv: f64,
    max_wait: Micros,
    /// Per group, the service that ran last (for turns).
    last: Vec<u16>,
}

/// A request's (level, budget left) after `attained` µs of GPU time.
fn level(attained: Micros, budget: Micros) -> (u32, Micros) {
    let mut b = budget.max(1);
    let mut lvl = 0;
    while attained >= b {
        b = b.saturating_mul(2);
        lvl += 1;
    }
    (lvl, b - attained)
}

/// The most urgent request of a service: a queued one has its whole budget left, the
/// newest admitted running one has had the least GPU time.
fn urgency(v: &SubView, max_wait: Micros) -> (u8, u32, Micros) {
    if v.idle_for >= max_wait {
        return (0, 0, Micros::MAX - v.idle_for);
    }
    let queued = (v.waiting > 0).then_some((0, v.budget.max(1)));
    let running = v.newest_attained.map(|a| level(a, v.budget));
    let (lvl, left) = match (queued, running) {
        (Some(q), Some(r)) => q.min(r),
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => (u32::MAX, Micros::MAX),
    };
    (1, lvl, left)
}

impl PoolPolicy for SeaLlm {
    fn place(
        &mut self,
        demand: &[ServiceDemand],
        groups: u32,
        room: &dyn Fn(&[u16]) -> f64,
    ) -> Vec<Vec<u16>> {
        let loads: Vec<f64> = demand.iter().map(|d| d.load).collect();
        let counts = split(&loads, groups);
        let mut by_load: Vec<u16> = (0..demand.len() as u16).collect();
        by_load.sort_by(|&a, &b| {
            loads[b as usize]
                .total_cmp(&loads[a as usize])
                .then(a.cmp(&b))
        });
        let mut out = Vec::with_capacity(groups as usize);
        for (s, &c) in counts.iter().enumerate() {
            for _ in 0..c {
                let mut set = vec![s as u16];
                for &o in &by_load {
                    if o as usize == s {
                        continue;
                    }
                    set.push(o);
                    if room(&set) < self.min_kv {
                        set.pop();
                    }
                }
                set.sort_unstable();
                out.push(set);
            }
        }
        out
    }

    fn pick(&mut self, group: u32, subs: &[SubView]) -> usize {
        match self.sched {
            Sched::DoublingBudget => (0..subs.len())
                .min_by_key(|&i| (urgency(&subs[i], self.max_wait), i))
                .unwrap_or(0),
            Sched::Turns => {
                let g = group as usize;
                if self.last.len() <= g {
                    self.last.resize(g + 1, u16::MAX);
                }
                let last = self.last[g];
                let i = (0..subs.len())
                    .min_by_key(|&i| (subs[i].service.wrapping_sub(last.wrapping_add(1)), i))
                    .unwrap_or(0);
                self.last[g] = subs[i].service;
                i
            }
        }
    }

    fn unified_kv(&self) -> bool {
        self.unified
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(service: u16, waiting: u32, newest: Option<Micros>, budget: Micros) -> SubView {
        SubView {
            service,
            waiting,
            running: u32::from(newest.is_some()),
            newest_attained: newest,
            budget,
            idle_for: 0,
        }
    }

    #[test]
    fn budgets_double_and_levels_drop() {
        assert_eq!(level(0, 100), (0, 100));
        assert_eq!(level(99, 100), (0, 1));
        assert_eq!(level(100, 100), (1, 100));
        assert_eq!(level(350, 100), (2, 50));
    }

    #[test]
    fn fresh_work_runs_before_requests_that_outgrew_their_budget() {
        let mut p = SeaLlm {
            sched: Sched::DoublingBudget,
            unified: true,
            min_kv: 0.3,
            max_wait: 1_000_000,
            last: Vec::new(),
        };
        // Service 0's newest request has had 3x its budget; service 1 has a queued one.
        let subs = [view(0, 0, Some(300), 100), view(1, 1, None, 1000)];
        assert_eq!(p.pick(0, &subs), 1);
        // Within level 0, the least budget left goes first.
        let subs = [view(0, 0, Some(50), 100), view(1, 1, None, 1000)];
        assert_eq!(p.pick(0, &subs), 0);
        // A service kept waiting past max_wait runs next.
        let mut starved = view(0, 0, Some(300), 100);
        starved.idle_for = 2_000_000;
        assert_eq!(p.pick(0, &[view(1, 1, None, 10), starved]), 1);
    }

    #[test]
    fn turns_rotate_among_services_with_work() {
        let mut p = SeaLlm {
            sched: Sched::Turns,
            unified: true,
            min_kv: 0.3,
            max_wait: 0,
            last: Vec::new(),
        };
        let subs = [view(0, 1, None, 1), view(2, 1, None, 1)];
        let picks: Vec<u16> = (0..4).map(|_| subs[p.pick(3, &subs)].service).collect();
        assert_eq!(picks, vec![0, 2, 0, 2]);
    }

    #[test]
    fn placement_colocates_what_fits_beside_the_primary() {
        let mut p = SeaLlm {
            sched: Sched::DoublingBudget,
            unified: true,
            min_kv: 0.3,
            max_wait: 0,
            last: Vec::new(),
        };
        let demand = [
            ServiceDemand {
                name: "a".into(),
                load: 3.0,
            },
            ServiceDemand {
                name: "b".into(),
                load: 1.0,
            },
            ServiceDemand {
                name: "c".into(),
                load: 1.0,
            },
        ];
        // Each model takes 0.3 of the memory: two fit together, three do not.
        let room = |set: &[u16]| 1.0 - 0.3 * set.len() as f64;
        let placed = p.place(&demand, 5, &room);
        assert_eq!(placed.len(), 5);
        assert_eq!(placed[0], vec![0, 1]);
        assert!(placed.iter().all(|g| g.len() == 2));
        assert!((0..3).all(|s| placed.iter().any(|g| g.contains(&s))));
    }
}
