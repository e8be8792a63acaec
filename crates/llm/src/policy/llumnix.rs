//! Llumnix (Sun et al., OSDI 2024): dispatch to the freest instance, live migration
//! from instances whose freeness falls below a threshold (or that preempted) to ones
//! above it, and auto-scaling on the cluster's average freeness.
//!
//! Freeness is the KV room each request on an instance could still grow into, in
//! blocks: `(free - watermark - queued demand) / requests`. For dispatch (and scaling)
//! every queued request counts; for migration only the head of the queue counts, so an
//! instance whose next prompt does not fit looks overloaded and sheds running requests
//! (de-fragmentation). A terminating instance's freeness is minus infinity, so ordinary
//! migration drains it. High-priority requests (§4.4.3 of the paper) carry headroom: each
//! adds a share of the cache to its instance's virtual usage, so normal requests are
//! dispatched elsewhere and migrated off (sources send normal requests first), and its
//! instance admits it first and preempts it last. The paper does not print the
//! headroom; 0.1 of the cache per request is ours (docs/llm.md sweeps it). Defaults follow the first public release (2024-07): threshold
//! 3, last-come-first-served request choice, at most 3 stages, last stage at 4 blocks,
//! scale thresholds 10 and 60 every 10 s.

use super::scaling::{self, Scaler, ms};
use super::{
    InstanceState, InstanceView, LlmPolicy, LlmPolicySpec, MigrationChoice, MigrationConfig, Scale,
    ScalingConfig, argmax, available,
};
use crate::replica::Load;
use crate::workload::{Micros, Request};
use apiary_core::params::{ParamError, ParamSpec, Params};

const THRESHOLD: ParamSpec = ParamSpec {
    key: "migrate_threshold",
    default: "3",
    about: "freeness (blocks per request) below which an instance sends, above which it receives",
};
const MIGRATE: ParamSpec = ParamSpec {
    key: "migration",
    default: "true",
    about: "migrate running requests between instances (false: Llumnix's dispatch alone)",
};
const CHOICE: ParamSpec = ParamSpec {
    key: "choice",
    default: "lcfs",
    about: "request a source sends: lcfs (last admitted) | sr (shortest running)",
};
const STAGES: ParamSpec = ParamSpec {
    key: "max_stages",
    default: "3",
    about: "copy stages before a migration is abandoned",
};
const LAST_STAGE: ParamSpec = ParamSpec {
    key: "last_stage_blocks",
    default: "4",
    about: "blocks left at which the stop-the-world last stage runs",
};
const BANDWIDTH: ParamSpec = ParamSpec {
    key: "bandwidth_gbs",
    default: "8",
    about: "migration bandwidth between instances, GB/s (64 Gb/s network)",
};
const OVERHEAD: ParamSpec = ParamSpec {
    key: "stage_overhead_ms",
    default: "10",
    about: "fixed cost of one migration stage (handshake, launch), ms",
};
const INTERVAL: ParamSpec = ParamSpec {
    key: "interval_ms",
    default: "50",
    about: "load polling and migration pairing period, ms",
};
const PAIRING: ParamSpec = ParamSpec {
    key: "pairing",
    default: "defrag",
    about: "defrag (every pair, the first release) | balanced (a pair only if moving one request narrows \
            the freeness gap without inverting it and leaves the destination above the threshold)",
};
const PRIORITIES: ParamSpec = ParamSpec {
    key: "priorities",
    default: "true",
    about: "instances admit high-priority requests first and preempt them last; their headroom \
            counts in the load",
};
const HEADROOM: ParamSpec = ParamSpec {
    key: "headroom",
    default: "0.1",
    about: "virtual KV usage added per high-priority request, as a share of an instance's cache",
};
/// How dispatch ranks instances whose freeness is negative (queued demand past their
/// free blocks). Llumnix's formula divides by the requests there too, so of two
/// overloaded instances the one with more requests looks freer, and under overload
/// work goes to the longest queue while others idle; `spread` multiplies instead.
pub(crate) const OVERLOAD: ParamSpec = ParamSpec {
    key: "overload",
    default: "artifact",
    about: "artifact (negative freeness divided by requests, as Llumnix's code: under overload the             longest queue looks freest) | spread (multiplied: the most over-committed looks fullest)",
};

/// The spec.
pub const SPEC: LlmPolicySpec = LlmPolicySpec {
    name: "llumnix",
    about: "dispatch to the freest instance; live-migrate requests from instances below the \
            freeness threshold to ones above it; optional auto-scaling",
    params: &[
        THRESHOLD,
        MIGRATE,
        CHOICE,
        STAGES,
        LAST_STAGE,
        BANDWIDTH,
        OVERHEAD,
        INTERVAL,
        PAIRING,
        PRIORITIES,
        HEADROOM,
        OVERLOAD,
        scaling::AUTOSCALE,
        scaling::SCALE_UP,
        scaling::SCALE_DOWN,
        scaling::SCALE_INTERVAL,
        scaling::MIN_INST,
        scaling::MAX_INST,
        scaling::STARTUP,
    ],
    build,
};

fn build(p: &Params) -> Result<Box<dyn LlmPolicy>, ParamError> {
    let migration = p.bool(&MIGRATE)?.then_some(MigrationConfig {
        max_stages: p.u64_in(&STAGES, 1..=1000)? as u32,
        last_stage_blocks: p.u64_in(&LAST_STAGE, 0..=1_000_000)? as u32,
        bandwidth: {
            let gbs = p.f64(&BANDWIDTH)?;
            if gbs <= 0.0 {
                return Err(ParamError::Bad {
                    key: BANDWIDTH.key.into(),
                    value: gbs.to_string(),
                    message: "expected GB/s above 0".into(),
                });
            }
            gbs * 1e9
        },
        stage_overhead: ms(p, &OVERHEAD)?,
        choice: p.choice(
            &CHOICE,
            &[
                ("lcfs", MigrationChoice::Lcfs),
                ("sr", MigrationChoice::ShortestRunning),
            ],
        )?,
    });
    let interval = ms(p, &INTERVAL)?.max(1_000);
    let priorities = p.bool(&PRIORITIES)?;
    let headroom = p.f64(&HEADROOM)?;
    if !(0.0..=100.0).contains(&headroom) {
        return Err(ParamError::Bad {
            key: HEADROOM.key.into(),
            value: headroom.to_string(),
            message: "expected a share of the cache between 0 and 100".into(),
        });
    }
    Ok(Box::new(Llumnix {
        spread: spread(p)?,
        threshold: p.signed(&THRESHOLD)?,
        balanced: p.choice(&PAIRING, &[("defrag", false), ("balanced", true)])?,
        priorities,
        headroom: if priorities { headroom } else { 0.0 },
        migration,
        interval,
        scaler: Scaler::from_params(p)?,
        src: Vec::new(),
        dst: Vec::new(),
    }))
}

/// The `overload` parameter: whether negative freeness spreads work.
pub(crate) fn spread(p: &Params) -> Result<bool, ParamError> {
    p.choice(&OVERLOAD, &[("artifact", false), ("spread", true)])
}

struct Llumnix {
    spread: bool,
    threshold: f64,
    balanced: bool,
    priorities: bool,
    headroom: f64,
    migration: Option<MigrationConfig>,
    interval: Micros,
    scaler: Option<Scaler>,
    src: Vec<(f64, u32, Load)>,
    dst: Vec<(f64, u32, Load)>,
}

impl Llumnix {
    /// The `balanced` rule: after moving one request of the source's average size, the
    /// destination stays above the threshold and is still the freer, by less.
    fn narrows(&self, s: &(f64, u32, Load), d: &(f64, u32, Load)) -> bool {
        let (ls, ld) = (&s.2, &d.2);
        let used = f64::from(ls.total_blocks - ls.free_blocks);
        let moved = used / f64::from(ls.running.max(1));
        let after = |l: &Load, gain: f64, delta: i64| {
            let n = i64::from(l.running) + i64::from(l.waiting > 0) + delta;
            if n <= 0 {
                return f64::INFINITY;
            }
            (available(l) + gain - f64::from(l.head_blocks) - headroom_blocks(l, self.headroom))
                / n as f64
        };
        let (fs, fd) = (after(ls, moved, -1), after(ld, -moved, 1));
        let (before, gap) = (d.0 - s.0, fd - fs);
        fd > self.threshold && gap > 0.0 && gap < before
    }
}

/// Virtual usage beyond the physical: `headroom` (a share of the cache) for each
/// high-priority request, so that instances serving them look fuller than they are.
fn headroom_blocks(l: &Load, headroom: f64) -> f64 {
    headroom * f64::from(l.total_blocks) * f64::from(l.high)
}

/// Freeness for dispatch: every queued request's demand counts, and `headroom` (a
/// share of the cache) per high-priority request. With `spread`, negative freeness is
/// multiplied by the requests instead of divided (see [`OVERLOAD`]).
pub fn freeness_dispatch(v: &InstanceView, headroom: f64, spread: bool) -> f64 {
    if v.state == InstanceState::Terminating {
        return f64::NEG_INFINITY;
    }
    let l = &v.load;
    let n = l.running + l.waiting;
    if n == 0 {
        return f64::INFINITY;
    }
    let room = available(l) - l.waiting_blocks as f64 - headroom_blocks(l, headroom);
    if spread && room < 0.0 {
        room * f64::from(n)
    } else {
        room / f64::from(n)
    }
}

/// Freeness for migration: only the head of the queue counts (de-fragmentation).
pub fn freeness_migrate(v: &InstanceView, headroom: f64) -> f64 {
    if v.state == InstanceState::Terminating {
        return f64::NEG_INFINITY;
    }
    let l = &v.load;
    let n = l.running + u32::from(l.waiting > 0);
    if n == 0 {
        return f64::INFINITY;
    }
    (available(l) - f64::from(l.head_blocks) - headroom_blocks(l, headroom)) / f64::from(n)
}

impl LlmPolicy for Llumnix {
    fn dispatch(&mut self, _req: &Request, view: &[InstanceView]) -> Option<u32> {
        argmax(view, |v| freeness_dispatch(v, self.headroom, self.spread))
    }

    fn priorities(&self) -> bool {
        self.priorities
    }

    fn interval(&self) -> Option<Micros> {
        self.migration.map(|_| self.interval)
    }

    fn migration(&self) -> Option<MigrationConfig> {
        self.migration
    }

    fn rebalance(&mut self, view: &[InstanceView], pairs: &mut Vec<(u32, u32)>) {
        self.src.clear();
        self.dst.clear();
        for v in view
            .iter()
            .filter(|v| !v.migrating && v.state != InstanceState::Starting)
        {
            let f = freeness_migrate(v, self.headroom);
            if v.load.preempted > 0 || f < self.threshold {
                // A source needs a running request to send.
                if v.load.running > 0 {
                    self.src.push((f, v.id, v.load));
                }
            } else if f > self.threshold && v.state == InstanceState::Active {
                self.dst.push((f, v.id, v.load));
            }
        }
        self.src
            .sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        self.dst
            .sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (s, d) in self.src.iter().zip(&self.dst) {
            if !self.balanced || self.narrows(s, d) {
                pairs.push((s.1, d.1));
            }
        }
    }

    fn scaling(&self) -> Option<ScalingConfig> {
        self.scaler.as_ref().map(|s| s.cfg)
    }

    fn scale(&mut self, view: &[InstanceView], max: u32) -> Scale {
        self.scaler
            .as_ref()
            .map_or(Scale::Hold, |s| s.decide(view, max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(id: u32, free: u32, running: u32, waiting: u32, waiting_blocks: u64) -> InstanceView {
        InstanceView {
            id,
            state: InstanceState::Active,
            load: Load {
                total_blocks: 1000,
                block_size: 16,
                free_blocks: free,
                watermark: 10,
                running,
                waiting,
                waiting_blocks,
                ..Load::default()
            },
            migrating: false,
            cached_tokens: 0,
        }
    }

    #[test]
    fn under_overload_the_artifact_picks_the_longest_queue_and_spread_does_not() {
        // Both overloaded: room 10 free - 10 watermark - 100 queued = -100 blocks each. Instance 0 has 20
        // requests (freeness -5), instance 1 has 4 (-25): Llumnix's formula rates the
        // longer queue freer. Spread gives -2,000 and -400, and picks instance 1.
        let view = [inst(0, 10, 10, 10, 100), inst(1, 10, 2, 2, 100)];
        assert_eq!(freeness_dispatch(&view[0], 0.0, false), -5.0);
        assert_eq!(freeness_dispatch(&view[1], 0.0, false), -25.0);
        assert_eq!(argmax(&view, |v| freeness_dispatch(v, 0.0, false)), Some(0));
        assert_eq!(argmax(&view, |v| freeness_dispatch(v, 0.0, true)), Some(1));
        // With room to spare both agree: 190 blocks over 2 requests beats 90 over 1.
        let calm = [inst(0, 100, 1, 0, 0), inst(1, 200, 2, 0, 0)];
        for spread in [false, true] {
            assert_eq!(
                argmax(&calm, |v| freeness_dispatch(v, 0.0, spread)),
                Some(1)
            );
        }
    }
}
