//! The two ways a pod list meets a cluster.
//!
//! - **Fill** (FGD's experiment, `--mode fill:1.3`): the pod list, sorted by name and
//!   shuffled by the seed, is trimmed by random removals or extended by random copies
//!   until its GPU request reaches the ratio times the cluster's GPUs; the pods then
//!   arrive one after another and never leave. A pod that fits nowhere stays out.
//! - **Replay** (`--mode event`): pods arrive at their creation times and leave at their
//!   deletion times (a deletion before a creation at the same second only when the
//!   file lists it first), a pod without a deletion time stays.
//!
//! Both record, after every event, the GPU thousandths that have arrived, are in use and
//! are fragmented, from which [`ByArrived`] draws FGD's curves.

use crate::ShareError;
use crate::cluster::Prepared;
use crate::policy::SharePolicy;
use crate::scheduler::{Placed, Scheduler};
use crate::typical::Typical;
use apiary_core::Rng;
use apiary_model::share::Pod;

/// How pods meet the cluster.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// FGD's experiment: fill to this multiple of the cluster's GPUs.
    Fill(f64),
    /// The trace's own creation and deletion times.
    Replay,
}

impl Mode {
    /// `fill:RATIO` (0 < RATIO <= 10) or `event`.
    pub fn parse(s: &str) -> Option<Mode> {
        if s == "event" {
            return Some(Mode::Replay);
        }
        let r: f64 = s.strip_prefix("fill:")?.parse().ok()?;
        (r > 0.0 && r <= 10.0).then_some(Mode::Fill(r))
    }
}

/// The state after one event.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// When, seconds from the trace's start (`--mode event`; 0 when filling).
    pub time: u64,
    /// GPU thousandths requested by the pods that have arrived so far.
    pub arrived_milli: i64,
    /// GPU thousandths in use.
    pub used_milli: i64,
    /// Idle GPU thousandths fragmented for the typical pods.
    pub frag_milli: f64,
    /// Idle GPU thousandths.
    pub idle_milli: i64,
}

/// One pod's arrival in a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Arrival {
    /// Index into the pod list.
    pub pod: usize,
    /// Where it went; `None` if it fit nowhere.
    pub placed: Option<Placed>,
}

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// After each event.
    pub steps: Vec<Step>,
    /// Each arrival, in order.
    pub arrivals: Vec<Arrival>,
    /// GPUs in the cluster.
    pub total_gpus: u64,
}

impl Outcome {
    /// Pods that found a node.
    pub fn placed(&self) -> usize {
        self.arrivals.iter().filter(|a| a.placed.is_some()).count()
    }
}

/// The pods of a fill run, as indices into `pods`: FGD's `SortClusterPods` with
/// `shufflePod` then `TunePodsByNodeTotalResource`. Random copies stop before the one
/// whose per-GPU thousandths would pass the target, as the artifact checks it; a list
/// with no GPU pod is not extended.
pub fn fill_order(pods: &[Pod], total_gpus: u64, ratio: f64, seed: u64) -> Vec<usize> {
    let mut by_name: Vec<usize> = (0..pods.len()).collect();
    by_name.sort_by(|&a, &b| pods[a].name.cmp(&pods[b].name));
    let mut order = by_name.clone();
    let mut rng = Rng::stream(seed, "share-fill");
    rng.shuffle(&mut order);
    let target = ratio * total_gpus as f64 * 1000.0;
    let mut total: u64 = pods.iter().map(Pod::total_gpu_milli).sum();
    while total as f64 > target && !order.is_empty() {
        let k = rng.below(order.len() as u64) as usize;
        total -= pods[order.remove(k)].total_gpu_milli();
    }
    // Copies of pods that ask for no GPU never reach a GPU target: a list of them
    // alone is left as it is (the artifact would draw forever).
    let any_gpu = pods.iter().any(|p| p.total_gpu_milli() > 0);
    if (total as f64) < target && any_gpu {
        loop {
            let j = by_name[rng.below(by_name.len() as u64) as usize];
            if (total + u64::from(pods[j].gpu_milli)) as f64 > target {
                break;
            }
            total += pods[j].total_gpu_milli();
            order.push(j);
        }
    }
    order
}

/// Runs `policy` over `pods` on `prep`'s cluster in `mode`.
pub fn run(
    prep: &Prepared,
    pods: &[Pod],
    typical: Vec<Typical>,
    policy: Box<dyn SharePolicy>,
    mode: Mode,
    seed: u64,
) -> Result<Outcome, ShareError> {
    if prep.pods.len() != pods.len() {
        return Err(ShareError::Input(format!(
            "{} pods prepared for {} pods",
            prep.pods.len(),
            pods.len()
        )));
    }
    let mut s = Scheduler::new(prep, typical, policy, seed);
    let total_gpus = prep.total_gpus();
    let events = match mode {
        Mode::Fill(r) => fill_order(pods, total_gpus, r, seed)
            .into_iter()
            .map(|p| (0, Event::Arrive(p)))
            .collect(),
        Mode::Replay => replay_events(pods),
    };
    let mut out = Outcome {
        steps: Vec::with_capacity(events.len()),
        arrivals: Vec::new(),
        total_gpus,
    };
    // Where each pod runs now, by pod index, for its departure.
    let mut running: Vec<Option<Placed>> = vec![None; pods.len()];
    let mut arrived = 0i64;
    for (time, e) in events {
        match e {
            Event::Arrive(p) => {
                let r = &prep.pods[p];
                arrived += r.demand.total_milli();
                let placed = s.place(r);
                if mode == Mode::Replay {
                    running[p] = placed;
                }
                out.arrivals.push(Arrival { pod: p, placed });
            }
            Event::Leave(p) => {
                if let Some(at) = running[p].take() {
                    s.release(&prep.pods[p], &at);
                }
            }
        }
        out.steps.push(Step {
            time,
            arrived_milli: arrived,
            used_milli: s.used_milli(),
            frag_milli: s.frag_milli(),
            idle_milli: s.idle_milli(),
        });
    }
    Ok(out)
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Arrive(usize),
    Leave(usize),
}

/// Creations and deletions by time, each pod's creation before its deletion, file
/// order on equal times (FGD's `syncClusterResourceList`).
fn replay_events(pods: &[Pod]) -> Vec<(u64, Event)> {
    let mut ev: Vec<(u64, Event)> = Vec::with_capacity(pods.len() * 2);
    for (i, p) in pods.iter().enumerate() {
        let c = p.creation.unwrap_or(0);
        ev.push((c, Event::Arrive(i)));
        if let Some(d) = p.deletion {
            ev.push((d.max(c), Event::Leave(i)));
        }
    }
    ev.sort_by_key(|e| e.0);
    ev
}

/// The cluster hour by hour in `--mode event`: its state at the end of each hour from
/// the trace's start (after every event in it or before), as percentages: GPUs
/// allocated, fragmented GPUs of all, fragmented GPUs of the idle ones.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ByHour {
    /// GPU thousandths in use, percent of the cluster's.
    pub alloc_pct: Vec<f64>,
    /// Fragmented GPU thousandths, percent of the cluster's.
    pub frag_pct: Vec<f64>,
    /// Fragmented GPU thousandths, percent of the idle ones.
    pub frag_ratio_pct: Vec<f64>,
}

impl ByHour {
    /// The hourly state of `o`, up to its last event.
    pub fn of(o: &Outcome) -> ByHour {
        let total = o.total_gpus as f64 * 1000.0;
        let mut out = ByHour::default();
        let Some(last) = o.steps.last() else {
            return out;
        };
        let mut k = 0;
        let mut at = (0i64, 0.0f64, total as i64);
        for hour in 0..=last.time / 3600 {
            while k < o.steps.len() && o.steps[k].time < (hour + 1) * 3600 {
                let s = &o.steps[k];
                at = (s.used_milli, s.frag_milli, s.idle_milli);
                k += 1;
            }
            out.alloc_pct.push(round2(100.0 * at.0 as f64 / total));
            out.frag_pct.push(round2(100.0 * at.1 / total));
            out.frag_ratio_pct.push(if at.2 > 0 {
                round2(100.0 * at.1 / at.2 as f64)
            } else {
                0.0
            });
        }
        out
    }
}

/// FGD's curves: the allocation ratio and fragmentation when the arrived GPU request
/// reaches each percent (0 to 130) of the cluster's GPUs, averaged over the events in
/// that percent, or within one percent of it when none falls in it (the artifact's
/// `merge_*_discrete.py`). `None` where no event is near.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ByArrived {
    /// GPU thousandths in use, percent of the cluster's.
    pub alloc_pct: Vec<Option<f64>>,
    /// Fragmented GPU thousandths, percent of the cluster's.
    pub frag_pct: Vec<Option<f64>>,
    /// Fragmented GPU thousandths, percent of the idle ones.
    pub frag_ratio_pct: Vec<Option<f64>>,
}

/// The last percent of arrived load FGD reports.
pub const MAX_ARRIVED_PCT: usize = 130;

impl ByArrived {
    /// The curves of `o`.
    pub fn of(o: &Outcome) -> ByArrived {
        let total = o.total_gpus as f64;
        let rows: Vec<Row> = o
            .steps
            .iter()
            .map(|s| {
                let arrive = round_half_even(s.arrived_milli as f64 / total / 10.0);
                let alloc = round2(s.used_milli as f64 / total / 10.0);
                let ratio = if s.idle_milli > 0 {
                    round2(100.0 * s.frag_milli / s.idle_milli as f64)
                } else {
                    f64::NAN
                };
                Row {
                    arrive: arrive as i64,
                    alloc,
                    frag: s.frag_milli,
                    ratio,
                }
            })
            .collect();
        let mut out = ByArrived::default();
        for k in 0..=MAX_ARRIVED_PCT as i64 {
            let mut near: Vec<&Row> = rows.iter().filter(|r| r.arrive == k).collect();
            if near.is_empty() {
                near = rows.iter().filter(|r| (r.arrive - k).abs() <= 1).collect();
            }
            if near.is_empty() {
                out.alloc_pct.push(None);
                out.frag_pct.push(None);
                out.frag_ratio_pct.push(None);
                continue;
            }
            let mean = |f: fn(&Row) -> f64| {
                let v: Vec<f64> = near
                    .iter()
                    .map(|r| f(r))
                    .filter(|x| x.is_finite())
                    .collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            };
            out.alloc_pct.push(mean(|r| r.alloc).map(round2));
            out.frag_pct
                .push(mean(|r| r.frag).map(|m| round2(100.0 * m / 1000.0 / total)));
            out.frag_ratio_pct.push(mean(|r| r.ratio).map(round2));
        }
        out
    }

    /// The allocation ratio at `pct` percent arrived.
    pub fn alloc_at(&self, pct: usize) -> Option<f64> {
        self.alloc_pct.get(pct).copied().flatten()
    }
}

/// One step as the curves read it: arrived percent (rounded), allocation percent
/// (two decimals), fragmented thousandths, fragmented percent of idle (two decimals, as
/// the artifact's log prints it).
struct Row {
    arrive: i64,
    alloc: f64,
    frag: f64,
    ratio: f64,
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Python's `round(x, 0)`: halves to the even neighbour.
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

/// What a sweep collects of a GPU-sharing run: `(name, meaning)`.
pub const METRICS: &[(&str, &str)] = &[
    (
        "alloc_pct_100",
        "GPUs allocated at 100 % arrived GPU request, % (FGD's headline)",
    ),
    ("alloc_pct_130", "GPUs allocated at 130 % arrived, %"),
    ("alloc_pct_final", "GPUs allocated after the last event, %"),
    (
        "frag_pct_80",
        "fragmented GPUs at 80 % arrived, % of all GPUs",
    ),
    (
        "frag_ratio_pct_80",
        "fragmented GPUs at 80 % arrived, % of idle GPUs",
    ),
    ("pods_placed", "arrivals that found a node"),
    ("pods_failed", "arrivals that fit nowhere"),
];

/// One run's figures, by [`METRICS`] name.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    curves: ByArrived,
    alloc_final: f64,
    placed: usize,
    failed: usize,
}

impl Figures {
    /// The figures of `o`.
    pub fn of(o: &Outcome) -> Figures {
        let total = o.total_gpus as f64 * 1000.0;
        let placed = o.placed();
        Figures {
            curves: ByArrived::of(o),
            alloc_final: o
                .steps
                .last()
                .map_or(0.0, |s| 100.0 * s.used_milli as f64 / total),
            placed,
            failed: o.arrivals.len() - placed,
        }
    }

    /// The figure called `name`, if the run has one.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let c = &self.curves;
        match name {
            "alloc_pct_100" => c.alloc_at(100),
            "alloc_pct_130" => c.alloc_at(130),
            "alloc_pct_final" => Some(self.alloc_final),
            "frag_pct_80" => c.frag_pct.get(80).copied().flatten(),
            "frag_ratio_pct_80" => c.frag_ratio_pct.get(80).copied().flatten(),
            "pods_placed" => Some(self.placed as f64),
            "pods_failed" => Some(self.failed as f64),
            _ => None,
        }
    }
}
