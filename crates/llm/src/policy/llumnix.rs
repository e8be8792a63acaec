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

use super::{
    InstanceState, InstanceView, LlmPolicy, LlmPolicySpec, MigrationChoice, MigrationConfig, Scale,
    ScalingConfig, argmax,
};
use crate::replica::Load;
use crate::workload::{Micros, Request};
use apiary_policy::{ParamError, ParamSpec, Params};

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
const AUTOSCALE: ParamSpec = ParamSpec {
    key: "autoscale",
    default: "false",
    about: "add and drain instances to keep the average freeness within [scale_up, scale_down]",
};
const SCALE_UP: ParamSpec = ParamSpec {
    key: "scale_up",
    default: "10",
    about: "average freeness below which instances are added",
};
const SCALE_DOWN: ParamSpec = ParamSpec {
    key: "scale_down",
    default: "60",
    about: "average freeness (with one instance fewer) above which one is drained",
};
const SCALE_INTERVAL: ParamSpec = ParamSpec {
    key: "scale_interval_s",
    default: "10",
    about: "seconds between scaling decisions",
};
const MIN_INST: ParamSpec = ParamSpec {
    key: "min_instances",
    default: "1",
    about: "fewest active instances under auto-scaling",
};
const MAX_INST: ParamSpec = ParamSpec {
    key: "max_instances",
    default: "0",
    about: "most instances under auto-scaling (0: the --instances count)",
};
const STARTUP: ParamSpec = ParamSpec {
    key: "startup_s",
    default: "10",
    about: "seconds a new instance takes to load its model",
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
        PRIORITIES,
        HEADROOM,
        AUTOSCALE,
        SCALE_UP,
        SCALE_DOWN,
        SCALE_INTERVAL,
        MIN_INST,
        MAX_INST,
        STARTUP,
    ],
    build,
};

fn ms(p: &Params, spec: &ParamSpec) -> Result<Micros, ParamError> {
    Ok((p.f64(spec)? * 1e3).round() as Micros)
}

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
    let scaling = p
        .bool(&AUTOSCALE)?
        .then_some(())
        .map(|()| -> Result<_, ParamError> {
            Ok(ScalingConfig {
                interval: ms(p, &SCALE_INTERVAL)?.saturating_mul(1000).max(1_000),
                min: p.u64_in(&MIN_INST, 1..=100_000)? as u32,
                max: p.u64_in(&MAX_INST, 0..=100_000)? as u32,
                startup: ms(p, &STARTUP)?.saturating_mul(1000),
            })
        });
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
        threshold: p.signed(&THRESHOLD)?,
        priorities,
        headroom: if priorities { headroom } else { 0.0 },
        migration,
        interval,
        scaling: scaling.transpose()?,
        scale_up: p.signed(&SCALE_UP)?,
        scale_down: p.signed(&SCALE_DOWN)?,
        src: Vec::new(),
        dst: Vec::new(),
    }))
}

struct Llumnix {
    threshold: f64,
    priorities: bool,
    headroom: f64,
    migration: Option<MigrationConfig>,
    interval: Micros,
    scaling: Option<ScalingConfig>,
    scale_up: f64,
    scale_down: f64,
    src: Vec<(f64, u32)>,
    dst: Vec<(f64, u32)>,
}

fn available(l: &Load) -> f64 {
    f64::from(l.free_blocks) - f64::from(l.watermark)
}

/// Virtual usage beyond the physical: `headroom` (a share of the cache) for each
/// high-priority request, so that instances serving them look fuller than they are.
fn headroom_blocks(l: &Load, headroom: f64) -> f64 {
    headroom * f64::from(l.total_blocks) * f64::from(l.high)
}

/// Freeness for dispatch: every queued request's demand counts, and `headroom` (a
/// share of the cache) per high-priority request.
pub fn freeness_dispatch(v: &InstanceView, headroom: f64) -> f64 {
    if v.state == InstanceState::Terminating {
        return f64::NEG_INFINITY;
    }
    let l = &v.load;
    let n = l.running + l.waiting;
    if n == 0 {
        return f64::INFINITY;
    }
    (available(l) - l.waiting_blocks as f64 - headroom_blocks(l, headroom)) / f64::from(n)
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
        argmax(view, |v| freeness_dispatch(v, self.headroom))
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
                    self.src.push((f, v.id));
                }
            } else if f > self.threshold && v.state == InstanceState::Active {
                self.dst.push((f, v.id));
            }
        }
        self.src
            .sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        self.dst
            .sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        pairs.extend(self.src.iter().zip(&self.dst).map(|(s, d)| (s.1, d.1)));
    }

    fn scaling(&self) -> Option<ScalingConfig> {
        self.scaling
    }

    fn scale(&mut self, view: &[InstanceView], max: u32) -> Scale {
        let Some(cfg) = self.scaling else {
            return Scale::Hold;
        };
        // Starting instances count as the room they will bring; draining ones as gone.
        let (mut room, mut reqs, mut cap, mut n, mut settled) = (0.0, 0u64, 0.0, 0u32, true);
        for v in view {
            match v.state {
                InstanceState::Active => {
                    room += available(&v.load) - v.load.waiting_blocks as f64;
                    reqs += u64::from(v.load.running + v.load.waiting);
                    n += 1;
                }
                InstanceState::Starting => {
                    room += available(&v.load);
                    n += 1;
                    settled = false;
                }
                InstanceState::Terminating => settled = false,
            }
            cap = f64::from(v.load.total_blocks);
        }
        let avg = |room: f64| {
            if reqs == 0 {
                f64::INFINITY
            } else {
                room / reqs as f64
            }
        };
        if avg(room) < self.scale_up && n < max {
            let mut k = 1;
            while n + k < max && avg(room + cap * f64::from(k)) < self.scale_up {
                k += 1;
            }
            return Scale::Up(k);
        }
        // Shrink one at a time, once earlier starts and drains are done.
        if settled && n > cfg.min && avg(room - cap) > self.scale_down {
            let victim = view
                .iter()
                .filter(|v| v.state == InstanceState::Active)
                .min_by_key(|v| (v.load.running + v.load.waiting, std::cmp::Reverse(v.id)))
                .map(|v| v.id);
            if let Some(id) = victim {
                return Scale::Down(id);
            }
        }
        Scale::Hold
    }
}
