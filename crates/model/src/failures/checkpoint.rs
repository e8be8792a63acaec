//! Checkpoint levels and their intervals: what each level costs to save and restore for
//! a job, which failures it survives, and how often to save it so that the job spends
//! the least time on checkpoints and lost work together.
//!
//! The wasted time follows §10 of `../shared/specs/training-policies.md`. Per hour of
//! useful work, level ℓ stalls the job `c_ℓ / τ_ℓ`; a failure of class k (rate λ_k per
//! wall-clock hour) costs the work since the last save of the level it recovers from
//! (`τ/2` on average), that level's restore `r_ℓ`, and the restart `D`. So the effective
//! training time ratio is
//!
//! `ETTR = (1 − Σ_k λ_k (τ_ℓ(k)/2 + r_ℓ(k) + D)) / (1 + Σ_ℓ c_ℓ / τ_ℓ)`,
//!
//! where a recovery of `d = r + D` seconds counts `(1 − e^(−Λd))/Λ` of them, Λ the rate
//! of all failures: the next failure can cut it short, and starts its own.
//!
//! and Young's interval `τ_ℓ = √(2 c_ℓ / Λ_ℓ)` (Daly's refinement, likewise) minimises
//! each level's share, Λ_ℓ being the rate of the failures it covers.

use super::FailureModel;
use serde::Deserialize;

/// The shortest interval of training between two saves of a level, seconds. A save
/// happens between training iterations, and a level cheap enough for a rule to ask for
/// less (a fast store, a tiny checkpoint) costs next to nothing at 1 s anyway; the floor
/// also bounds the Monte Carlo run to one save per second of training per level.
pub const MIN_INTERVAL_S: f64 = 1.0;

/// Bytes of checkpoint per parameter: bf16 weights (2), an fp32 master copy (4) and
/// Adam's two fp32 moments (8), plus 2 for bf16 gradients kept for the step.
pub const BYTES_PER_PARAM: f64 = 16.0;

/// One checkpoint level.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    /// Its name (`host`, `peer`, `storage`).
    pub name: String,
    /// The failure kinds (or class names) its checkpoints survive.
    pub survives: Vec<String>,
    /// GB/s at which one node writes its shard.
    pub save_gbps: f64,
    /// Share of the save hidden behind training (CheckFreq's pipelined snapshot,
    /// Gemini's interleaved traffic); the rest stalls the job.
    #[serde(default)]
    pub overlap: f64,
    /// GB/s at which one node reads its shard back.
    pub restore_gbps: f64,
    /// GB/s the level takes from all nodes at once (a shared file system's), which
    /// caps each node's share when many save or restore together.
    #[serde(default)]
    pub aggregate_gbps: Option<f64>,
    /// A fixed interval of training between saves, seconds (overrides the rule).
    #[serde(default)]
    pub interval_s: Option<f64>,
}

/// The built-in levels: a snapshot in the node's host memory (GPU to host over PCIe),
/// a replica in a peer's host memory over the network (Gemini), and persistent storage
/// (CheckFreq's persist phase). Their bandwidths are round figures for an H100 node
/// (PCIe Gen5 to host, a 200 Gb/s NIC, 2 GB/s to a parallel file system that serves
/// 1 TB/s in all), not measured;
/// half of each in-memory save hides behind training, and nine tenths of the persist,
/// which runs from the host's copy in the background.
pub fn default_levels() -> Vec<Level> {
    let level = |name: &str, survives: &[&str], save, overlap, restore, aggregate| Level {
        name: name.into(),
        survives: survives.iter().map(|s| s.to_string()).collect(),
        save_gbps: save,
        overlap,
        restore_gbps: restore,
        aggregate_gbps: aggregate,
        interval_s: None,
    };
    vec![
        level("host", &["process"], 100.0, 0.5, 100.0, None),
        level("peer", &["process", "node"], 25.0, 0.5, 25.0, None),
        level(
            "storage",
            &["process", "node", "correlated"],
            2.0,
            0.9,
            2.0,
            Some(1000.0),
        ),
    ]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LevelsFile {
    #[serde(rename = "level")]
    levels: Vec<Level>,
}

/// How each level's interval is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// Young's `√(2c/Λ)`, Λ every failure the level survives.
    Young,
    /// Daly's higher-order refinement of Young's, same Λ.
    Daly,
    /// CheckFreq: as often as an overhead cap allows, the cap (a share of training
    /// time) split evenly between the levels.
    Cap(f64),
    /// Multi-level frequency by risk: Young's with Λ only the failures the level is the
    /// one to recover from (the cheapest surviving level takes each class).
    Risk,
}

impl std::str::FromStr for Rule {
    type Err = String;
    fn from_str(s: &str) -> Result<Rule, String> {
        match s {
            "young" => Ok(Rule::Young),
            "daly" => Ok(Rule::Daly),
            "risk" => Ok(Rule::Risk),
            _ => {
                let cap = s.strip_prefix("cap:").ok_or_else(|| {
                    format!("'{s}': give risk, young, daly or cap:SHARE (cap:0.035)")
                })?;
                let v: f64 = match cap.strip_suffix('%') {
                    Some(p) => p.parse::<f64>().map(|p| p / 100.0),
                    None => cap.parse(),
                }
                .map_err(|_| format!("'{s}': the cap is a share (0.035) or a percentage (3.5%)"))?;
                if v > 0.0 && v < 1.0 {
                    Ok(Rule::Cap(v))
                } else {
                    Err(format!("'{s}': the cap lies strictly between 0 and 1"))
                }
            }
        }
    }
}

/// A plan that cannot be made.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    /// A levels file does not parse.
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// What is wrong, with its line.
        message: String,
    },
    /// A level's field is out of range.
    #[error("{file}: level[{level}].{field}: {message}")]
    Field {
        /// The file.
        file: String,
        /// The level's index.
        level: usize,
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// No level survives a class: every such failure would start the job over.
    #[error(
        "no checkpoint level survives failure class '{class}' ({kind}); add one whose survives lists it"
    )]
    Unsurvived {
        /// The class.
        class: String,
        /// Its kind.
        kind: &'static str,
    },
    /// The job has no GPUs or no checkpoint.
    #[error("{0}")]
    Job(String),
}

/// Whether each level survives each class of `model`: `survives` names the class's kind
/// or the class itself.
pub fn survival(model: &FailureModel, levels: &[Level]) -> Vec<Vec<bool>> {
    levels
        .iter()
        .map(|l| model.classes.iter().map(|c| l.survives_class(c)).collect())
        .collect()
}

impl Level {
    /// Whether its checkpoints survive a failure of class `c`.
    pub fn survives_class(&self, c: &super::FailureClass) -> bool {
        // A fatal failure rolls nothing back: there is nothing for a level to survive.
        c.kind == super::Kind::Fatal
            || self
                .survives
                .iter()
                .any(|s| s == c.kind.name() || *s == c.name)
    }
}

/// Reads `[[level]]` tables from the text of file `file`.
pub fn parse_levels(text: &str, file: &str) -> Result<Vec<Level>, PlanError> {
    let f: LevelsFile = toml::from_str(text).map_err(|e| PlanError::Parse {
        file: file.into(),
        message: e.to_string().trim().to_string(),
    })?;
    check_levels(&f.levels, file)?;
    Ok(f.levels)
}

/// Checks levels read from file `file`.
pub fn check_levels(levels: &[Level], file: &str) -> Result<(), PlanError> {
    for (i, l) in levels.iter().enumerate() {
        let bad = |field, message: &str| PlanError::Field {
            file: file.into(),
            level: i,
            field,
            message: message.into(),
        };
        if !(l.save_gbps.is_finite() && l.save_gbps > 0.0) {
            return Err(bad("save_gbps", "must be above 0"));
        }
        if !(l.restore_gbps.is_finite() && l.restore_gbps > 0.0) {
            return Err(bad("restore_gbps", "must be above 0"));
        }
        if !(0.0..1.0).contains(&l.overlap) {
            return Err(bad("overlap", "must be 0 or more and below 1"));
        }
        if l.interval_s
            .is_some_and(|t| !(t.is_finite() && t >= MIN_INTERVAL_S))
        {
            return Err(bad("interval_s", "must be 1 s or more"));
        }
        if l.aggregate_gbps
            .is_some_and(|g| !(g.is_finite() && g > 0.0))
        {
            return Err(bad("aggregate_gbps", "must be above 0"));
        }
        if l.survives.is_empty() {
            return Err(bad("survives", "name the kinds or classes it survives"));
        }
    }
    if levels.is_empty() {
        return Err(PlanError::Parse {
            file: file.into(),
            message: "give at least one [[level]]".into(),
        });
    }
    Ok(())
}

/// One level, planned for a job.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelPlan {
    /// Its name.
    pub name: String,
    /// Seconds the job stalls per save.
    pub stall_s: f64,
    /// Seconds to read a checkpoint back.
    pub restore_s: f64,
    /// Seconds of training between saves (infinite: never saved).
    pub interval_s: f64,
    /// Failures per hour it is the one to recover from.
    pub recovers_per_hour: f64,
    /// The classes it recovers (indices into the model's classes).
    pub recovers: Vec<usize>,
}

impl LevelPlan {
    /// Share of training time it stalls the job.
    pub fn overhead(&self) -> f64 {
        if self.interval_s.is_finite() {
            self.stall_s / self.interval_s
        } else {
            0.0
        }
    }
}

/// Where the time of a job under failures goes, as shares of wall-clock time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Waste {
    /// Stalled saving checkpoints.
    pub checkpoint: f64,
    /// Redoing work lost since the last surviving checkpoint.
    pub rework: f64,
    /// Reading checkpoints back.
    pub restore: f64,
    /// Detecting, rescheduling and restarting.
    pub restart: f64,
}

impl Waste {
    /// All of it.
    pub fn total(&self) -> f64 {
        self.checkpoint + self.rework + self.restore + self.restart
    }
}

/// A job's checkpoint plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// GPUs.
    pub gpus: u32,
    /// Nodes.
    pub nodes: u32,
    /// Checkpoint bytes, all shards.
    pub bytes: f64,
    /// Interruptions per hour.
    pub failures_per_hour: f64,
    /// The levels, in the order given.
    pub levels: Vec<LevelPlan>,
    /// Per class: the level it recovers from.
    pub recovery: Vec<usize>,
    /// Expected waste, shares of wall-clock time.
    pub waste: Waste,
    /// Effective training time ratio: useful training over wall-clock time.
    pub ettr: f64,
}

impl Plan {
    /// Mean hours between interruptions.
    pub fn mtti_hours(&self) -> f64 {
        1.0 / self.failures_per_hour
    }
}

fn young(c: f64, rate_per_s: f64) -> f64 {
    if rate_per_s > 0.0 {
        (2.0 * c / rate_per_s).sqrt()
    } else {
        f64::INFINITY
    }
}

/// Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart
/// dumps", eq. 37: `√(2cM)·[1 + ⅓√(c/2M) + (c/2M)/9] − c` for `c < 2M`, else `M`.
fn daly(c: f64, rate_per_s: f64) -> f64 {
    if rate_per_s <= 0.0 {
        return f64::INFINITY;
    }
    let m = 1.0 / rate_per_s;
    if c >= 2.0 * m {
        return m;
    }
    let x = c / (2.0 * m);
    (2.0 * c * m).sqrt() * (1.0 + x.sqrt() / 3.0 + x / 9.0) - c
}

/// Plans `levels` for a job on `gpus` GPUs with a checkpoint of `bytes`, under `model`.
pub fn plan(
    model: &FailureModel,
    levels: &[Level],
    gpus: u32,
    bytes: f64,
    rule: Rule,
) -> Result<Plan, PlanError> {
    if gpus == 0 {
        return Err(PlanError::Job("a job has at least 1 GPU".into()));
    }
    if !(bytes.is_finite() && bytes > 0.0) {
        return Err(PlanError::Job("the checkpoint has a size above 0".into()));
    }
    let nodes = gpus.div_ceil(model.gpus_per_node);
    let shard_gb = bytes / f64::from(nodes) / 1e9;
    let survives = |l: &Level, k: usize| l.survives_class(&model.classes[k]);
    let rates: Vec<f64> = model
        .classes
        .iter()
        .map(|c| model.recoverable_rate(c, gpus) / 3600.0)
        .collect();
    let mut out: Vec<LevelPlan> = levels
        .iter()
        .map(|l| {
            let share = l
                .aggregate_gbps
                .map_or(f64::INFINITY, |g| g / f64::from(nodes));
            LevelPlan {
                name: l.name.clone(),
                stall_s: shard_gb / l.save_gbps.min(share) * (1.0 - l.overlap),
                restore_s: shard_gb / l.restore_gbps.min(share),
                interval_s: f64::INFINITY,
                recovers_per_hour: 0.0,
                recovers: Vec::new(),
            }
        })
        .collect();
    for (k, c) in model.classes.iter().enumerate() {
        if !levels.iter().any(|l| survives(l, k)) {
            return Err(PlanError::Unsurvived {
                class: c.name.clone(),
                kind: c.kind.name(),
            });
        }
    }
    // Each class recovers from the surviving level that costs it least: half an interval
    // of rework plus the restore. With intervals not yet known, the cheapest to save.
    let choose = |out: &[LevelPlan], k: usize| -> usize {
        (0..levels.len())
            .filter(|&l| survives(&levels[l], k))
            .min_by(|&a, &b| {
                let cost = |l: usize| {
                    let p = &out[l];
                    if p.interval_s.is_finite() {
                        p.interval_s / 2.0 + p.restore_s
                    } else {
                        f64::INFINITY
                    }
                };
                cost(a)
                    .total_cmp(&cost(b))
                    .then(out[a].stall_s.total_cmp(&out[b].stall_s))
                    .then(a.cmp(&b))
            })
            .expect("checked above: some level survives every class")
    };
    let covered = |l: usize| -> f64 {
        (0..rates.len())
            .filter(|&k| survives(&levels[l], k))
            .map(|k| rates[k])
            .sum()
    };
    let active = levels.len() as f64;
    let mut recovery: Vec<usize> = (0..rates.len()).map(|k| choose(&out, k)).collect();
    for _ in 0..32 {
        for (l, lp) in out.iter_mut().enumerate() {
            let own: f64 = (0..rates.len())
                .filter(|&k| recovery[k] == l)
                .map(|k| rates[k])
                .sum();
            lp.interval_s = match (levels[l].interval_s, rule) {
                (Some(t), _) => t,
                (None, Rule::Young) => young(lp.stall_s, covered(l)),
                (None, Rule::Daly) => daly(lp.stall_s, covered(l)),
                (None, Rule::Cap(share)) => lp.stall_s * active / share,
                (None, Rule::Risk) => young(lp.stall_s, own),
            }
            .max(MIN_INTERVAL_S);
        }
        let next: Vec<usize> = (0..rates.len()).map(|k| choose(&out, k)).collect();
        if next == recovery {
            break;
        }
        recovery = next;
    }
    for lp in &mut out {
        lp.recovers.clear();
        lp.recovers_per_hour = 0.0;
    }
    let mut lost = 0.0;
    let mut waste = Waste::default();
    let total: f64 = rates.iter().sum();
    for (k, &l) in recovery.iter().enumerate() {
        if model.classes[k].kind == super::Kind::Fatal {
            continue; // it ends the job: nothing recovers from it
        }
        let lp = &mut out[l];
        lp.recovers.push(k);
        lp.recovers_per_hour += rates[k] * 3600.0;
        let rework = if lp.interval_s.is_finite() {
            lp.interval_s / 2.0
        } else {
            0.0
        };
        // The next failure can cut a recovery short (and starts its own): a recovery
        // of `d` seconds takes (1 - e^(-Λd)) / Λ of them on average.
        let d = lp.restore_s + model.restart_s;
        let down = if total * d > 1e-12 {
            (1.0 - (-total * d).exp()) / total
        } else {
            d
        };
        let restore = if d > 0.0 {
            down * lp.restore_s / d
        } else {
            0.0
        };
        waste.rework += rates[k] * rework;
        waste.restore += rates[k] * restore;
        waste.restart += rates[k] * (down - restore);
        lost += rates[k] * (rework + down);
    }
    let stalls: f64 = out.iter().map(LevelPlan::overhead).sum();
    // Per second of wall clock: failures cost `lost`, and what is left trains with
    // `stalls` per second of training on top.
    let ettr = ((1.0 - lost) / (1.0 + stalls)).max(0.0);
    waste.checkpoint = (1.0 - lost).max(0.0) * stalls / (1.0 + stalls);
    Ok(Plan {
        gpus,
        nodes,
        bytes,
        failures_per_hour: rates.iter().sum::<f64>() * 3600.0,
        levels: out,
        recovery,
        waste,
        ettr,
    })
}
