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
//! SeaLLM is not public: the two-stage placement, the starvation guard and the
//! re-placement rule are our reconstruction of what its paper describes.
//!
//! Adaptive re-placement: the first placement comes from each service's history (its
//! trace); every `replan_s` the policy folds the load measured over the interval into
//! a moving average over `horizon_s` (so a burst shorter than that, which would be over
//! before weights could move, does not move them), compares that mix with the one it
//! placed for, and re-places only when the shares moved by `drift` (L1 distance) and
//! the new placement lowers the busiest group's estimated load by `min_gain` of it,
//! since every model moved costs a weight load. While the mix holds, it looks half as
//! often each time, down to one look per 8 intervals.

use super::{PoolPolicy, PoolPolicySpec, ServiceDemand, SubView, align, peak_load, split};
use crate::workload::Micros;
use apiary_core::params::{ParamError, ParamSpec, Params};

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
const REPLAN: ParamSpec = ParamSpec {
    key: "replan_s",
    default: "30",
    about: "seconds between looks at the load mix for re-placement (0: place once; needs \
            unified_kv)",
};
const DRIFT: ParamSpec = ParamSpec {
    key: "drift",
    default: "0.2",
    about: "re-place when the services' load shares moved this far (L1) since the last \
            placement",
};
const MIN_GAIN: ParamSpec = ParamSpec {
    key: "min_gain",
    default: "0.1",
    about: "and only if the busiest group's estimated load drops by this share of it",
};
const HORIZON: ParamSpec = ParamSpec {
    key: "horizon_s",
    default: "300",
    about: "time constant of the moving average of each service's load, seconds",
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
    params: &[
        SCHED, UNIFIED, MIN_KV, MAX_WAIT, REPLAN, DRIFT, MIN_GAIN, HORIZON,
    ],
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
    let unified = p.bool(&UNIFIED)?;
    let replan_s = p.f64(&REPLAN)?;
    if !(replan_s.is_finite() && replan_s >= 0.0) {
        return Err(ParamError::Bad {
            key: REPLAN.key.into(),
            value: replan_s.to_string(),
            message: "expected seconds, 0 or more".into(),
        });
    }
    if replan_s > 0.0 && !unified && p.str(REPLAN.key).is_some() {
        return Err(ParamError::Bad {
            key: REPLAN.key.into(),
            value: replan_s.to_string(),
            message: "re-placement moves services between groups, which needs unified_kv=true"
                .into(),
        });
    }
    let every = (replan_s * 1e6).round() as Micros;
    Ok(Box::new(SeaLlm {
        sched: p.choice(
            &SCHED,
            &[("db", Sched::DoublingBudget), ("rr", Sched::Turns)],
        )?,
        unified,
        min_kv,
        max_wait: (p.f64(&MAX_WAIT)?.max(0.0) * 1e3).round() as Micros,
        last: Vec::new(),
        replan: Replan {
            every: (unified && every > 0).then_some(every),
            drift: p.f64(&DRIFT)?,
            min_gain: p.f64(&MIN_GAIN)?,
            horizon: p.f64(&HORIZON)?.max(0.0) * 1e6,
            smoothed: Vec::new(),
            shares: Vec::new(),
            stretch: 1,
            next_look: 0,
        },
    }))
}

/// The state of the re-placement rule.
struct Replan {
    every: Option<Micros>,
    drift: f64,
    min_gain: f64,
    /// Time constant of the average, µs.
    horizon: f64,
    /// Each service's load, averaged.
    smoothed: Vec<ServiceDemand>,
    /// Load shares the current placement was made for.
    shares: Vec<f64>,
    /// Intervals between looks (1, 2, 4, 8).
    stretch: u64,
    next_look: Micros,
}

fn shares(demand: &[ServiceDemand]) -> Vec<f64> {
    let total: f64 = demand.iter().map(|d| d.load.max(0.0)).sum();
    demand
        .iter()
        .map(|d| {
            if total > 0.0 {
                d.load.max(0.0) / total
            } else {
                0.0
            }
        })
        .collect()
}

struct SeaLlm {
    sched: Sched,
    unified: bool,
    min_kv: f64,
    max_wait: Micros,
    /// Per group, the service that ran last (for turns).
    last: Vec<u16>,
    replan: Replan,
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
        self.replan.shares = shares(demand);
        if self.replan.smoothed.len() != demand.len() {
            self.replan.smoothed = demand.to_vec();
        }
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

    fn replan_every(&self) -> Option<Micros> {
        self.replan.every
    }

    fn replan(
        &mut self,
        now: Micros,
        demand: &[ServiceDemand],
        current: &[Vec<u16>],
        room: &dyn Fn(&[u16]) -> f64,
    ) -> Option<Vec<Vec<u16>>> {
        let every = self.replan.every?;
        // The average takes in every interval, looked at or not.
        let keep = (-(every as f64) / self.replan.horizon.max(1.0)).exp();
        if self.replan.smoothed.len() != demand.len() {
            self.replan.smoothed = demand.to_vec();
        }
        for (avg, d) in self.replan.smoothed.iter_mut().zip(demand) {
            avg.load = keep * avg.load + (1.0 - keep) * d.load;
        }
        if now < self.replan.next_look {
            return None;
        }
        let demand = &self.replan.smoothed.clone();
        let now_shares = shares(demand);
        let moved: f64 = now_shares
            .iter()
            .zip(&self.replan.shares)
            .map(|(a, b)| (a - b).abs())
            .sum();
        let stable = |r: &mut Replan| {
            r.stretch = (r.stretch * 2).min(8);
            r.next_look = now + every * r.stretch;
            None
        };
        if now_shares.iter().all(|&x| x == 0.0) || moved < self.replan.drift {
            return stable(&mut self.replan);
        }
        let kept = self.replan.shares.clone();
        let new = align(current, self.place(demand, current.len() as u32, room));
        let before = peak_load(current, demand);
        let after = peak_load(&new, demand);
        if new == current || before - after < self.replan.min_gain * before {
            self.replan.shares = kept;
            return stable(&mut self.replan);
        }
        self.replan.stretch = 1;
        self.replan.next_look = now + every;
        Some(new)
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

    fn policy(sched: &str, max_wait_us: Micros) -> Box<dyn PoolPolicy> {
        let wait = format!("max_wait_ms={}", max_wait_us as f64 / 1e3);
        build(&Params::from_pairs([sched, wait.as_str()]).unwrap()).unwrap()
    }

    fn demand(loads: &[f64]) -> Vec<ServiceDemand> {
        loads
            .iter()
            .map(|&load| ServiceDemand {
                name: String::new(),
                load,
            })
            .collect()
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
        let mut p = policy("sched=db", 1_000_000);
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
        let mut p = policy("sched=rr", 0);
        let subs = [view(0, 1, None, 1), view(2, 1, None, 1)];
        let picks: Vec<u16> = (0..4).map(|_| subs[p.pick(3, &subs)].service).collect();
        assert_eq!(picks, vec![0, 2, 0, 2]);
    }

    #[test]
    fn placement_colocates_what_fits_beside_the_primary() {
        let mut p = policy("sched=db", 0);
        let demand = demand(&[3.0, 1.0, 1.0]);
        // Each model takes 0.3 of the memory: two fit together, three do not.
        let room = |set: &[u16]| 1.0 - 0.3 * set.len() as f64;
        let placed = p.place(&demand, 5, &room);
        assert_eq!(placed.len(), 5);
        assert_eq!(placed[0], vec![0, 1]);
        assert!(placed.iter().all(|g| g.len() == 2));
        assert!((0..3).all(|s| placed.iter().any(|g| g.contains(&s))));
    }

    #[test]
    fn re_places_when_the_mix_moves_and_backs_off_while_it_holds() {
        // No averaging: each look sees the last interval's load.
        let mut p = build(&Params::from_pairs(["horizon_s=0"]).unwrap()).unwrap();
        // Each model takes 0.45 of the memory: no two fit together.
        let room = |set: &[u16]| 1.0 - 0.45 * set.len() as f64;
        let placed = p.place(&demand(&[1.0, 1.0]), 4, &room);
        assert_eq!(placed, vec![vec![0], vec![0], vec![1], vec![1]]);
        let sec = 1_000_000;
        // The same mix: no change, and the next look is two intervals away.
        let look = |p: &mut Box<dyn PoolPolicy>, t: u64, loads: &[f64]| {
            p.replan(t * sec, &demand(loads), &placed, &room)
        };
        assert_eq!(look(&mut p, 30, &[2.0, 2.0]), None);
        assert_eq!(look(&mut p, 60, &[3.0, 0.1]), None);
        // Service 0 now carries nearly all the load: three groups go to it, and only
        // one group changes model.
        let new = look(&mut p, 90, &[3.0, 0.1]).unwrap();
        assert_eq!(new, vec![vec![0], vec![0], vec![1], vec![0]]);
        // The same shift, but a gain asked for that one move cannot give.
        let mut q = build(&Params::from_pairs(["min_gain=0.9", "horizon_s=0"]).unwrap()).unwrap();
        q.place(&demand(&[1.0, 1.0]), 4, &room);
        assert_eq!(look(&mut q, 30, &[3.0, 0.1]), None);
    }

    #[test]
    fn a_burst_shorter_than_the_horizon_moves_nothing() {
        let mut p = policy("sched=db", 0);
        let room = |set: &[u16]| 1.0 - 0.45 * set.len() as f64;
        let placed = p.place(&demand(&[1.0, 1.0]), 4, &room);
        let sec = 1_000_000;
        assert_eq!(
            p.replan(30 * sec, &demand(&[3.0, 0.1]), &placed, &room),
            None
        );
        // Held for ten minutes, the same mix does move it.
        let moved = (2..=20).any(|i| {
            p.replan(30 * sec * i, &demand(&[3.0, 0.1]), &placed, &room)
                .is_some()
        });
        assert!(moved);
    }

    #[test]
    fn re_placement_needs_the_unified_pool() {
        let p = build(&Params::from_pairs(["unified_kv=false"]).unwrap()).unwrap();
        assert_eq!(p.replan_every(), None);
        let e = build(&Params::from_pairs(["unified_kv=false", "replan_s=10"]).unwrap());
        assert!(e.is_err());
        let p = build(&Params::from_pairs(["replan_s=0"]).unwrap()).unwrap();
        assert_eq!(p.replan_every(), None);
    }
}
