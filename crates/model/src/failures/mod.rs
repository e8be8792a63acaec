//! Failures and multi-level checkpoints, as one model that the checkpoint planner, the
//! simulator and the live service share.
//!
//! A failure class has a rate per GPU, node or job hour and a kind, which says what it
//! destroys: a `process` failure kills the job's processes and leaves every host's
//! memory; a `node` failure also takes one node's memory with it (the node is replaced
//! or repaired); a `correlated` failure (switch, rack, power) takes many nodes and only
//! persistent storage survives it. A checkpoint level survives some kinds: a snapshot in
//! the host's memory survives process failures, a replica in a peer's memory (Gemini)
//! node failures too, and persistent storage everything. `../shared/specs/
//! training-policies.md` §10 sets out the model; [`checkpoint`] plans the intervals and
//! [`montecarlo`] runs one job through it.

pub mod checkpoint;
pub mod montecarlo;

use serde::Deserialize;

/// What a failure destroys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The job's processes die; every host's memory survives.
    Process,
    /// One node is lost with its memory; peers survive.
    Node,
    /// Many nodes at once (switch, rack, power): only persistent storage survives.
    Correlated,
    /// The job's own error (a bug, a bad input, out of memory): it ends failed and is
    /// not restarted, whatever its checkpoints. Kept out of checkpoint plans, which are
    /// for jobs that run to their end.
    Fatal,
}

impl Kind {
    /// Every kind, mildest first.
    pub const ALL: [Kind; 4] = [Kind::Process, Kind::Node, Kind::Correlated, Kind::Fatal];

    /// Its name in files and tables.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Process => "process",
            Kind::Node => "node",
            Kind::Correlated => "correlated",
            Kind::Fatal => "fatal",
        }
    }
}

/// What a class's rate counts per hour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    /// Each GPU: a job on N GPUs sees N times the rate.
    Gpu,
    /// Each node.
    Node,
    /// Each job, whatever its size.
    Job,
}

/// One class of failures.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureClass {
    /// Its name (`gpu`, `software`).
    pub name: String,
    /// What it destroys.
    pub kind: Kind,
    /// What its rate counts.
    pub per: Per,
    /// Failures per hour of one GPU, node or job.
    pub rate_per_hour: f64,
    /// Mean hours a failed node stays down (node and correlated kinds).
    #[serde(default)]
    pub repair_hours: f64,
    /// Weibull shape k of a fatal class counted per job: a job's time to such a failure
    /// from its start is Weibull with this shape and a scale of 1/`rate_per_hour` hours.
    /// Below 1 failures come early in a job's life; absent (or 1) the rate is constant.
    #[serde(default)]
    pub shape: Option<f64>,
}

/// A cluster's failure classes and what every failure costs besides lost work.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureModel {
    /// Its name (a preset's, or the file's `name`).
    #[serde(default)]
    pub name: String,
    /// Seconds from a failure to the job computing again, restore excluded: detection,
    /// rescheduling, process start and communicator setup.
    pub restart_s: f64,
    /// GPUs per node, for rates per node.
    #[serde(default = "eight")]
    pub gpus_per_node: u32,
    /// Checkpoint bytes per GPU of a job, GB, where the job's model is not known (the
    /// simulator's trace jobs): 16 is one billion parameters per GPU at 16 bytes each.
    #[serde(default = "sixteen")]
    pub checkpoint_gb_per_gpu: f64,
    /// The classes.
    #[serde(rename = "class")]
    pub classes: Vec<FailureClass>,
    /// The checkpoint levels the simulator's jobs save to (the built-in ones when
    /// none are given).
    #[serde(default, rename = "level")]
    pub levels: Vec<checkpoint::Level>,
    /// How the simulator sets the levels' intervals (`risk` when absent).
    #[serde(default)]
    pub rule: Option<String>,
    /// Failures to replay instead of drawing them from the rates: `[[event]]` tables,
    /// and the rows of the CSV file that `log` names.
    #[serde(default, rename = "event")]
    pub events: Vec<Event>,
    /// A CSV incident log to replay, relative to the model's file:
    /// `time_s,component,class[,repair_s]`, a component being `node:N` or `gpu:N`.
    #[serde(default)]
    pub log: Option<String>,
}

/// One failure to replay.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Seconds after the run's start.
    pub at_s: f64,
    /// Its class's name.
    pub class: String,
    /// The node it strikes (by index in the cluster)...
    #[serde(default)]
    pub node: Option<u32>,
    /// ...or the GPU (by index over the whole cluster).
    #[serde(default)]
    pub gpu: Option<u32>,
    /// How long the node stays down, seconds (the class's mean repair drawn when
    /// absent).
    #[serde(default)]
    pub repair_s: Option<f64>,
}

fn eight() -> u32 {
    8
}

fn sixteen() -> f64 {
    16.0
}

/// A failure model that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FailureError {
    /// The TOML does not parse.
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// What is wrong, with its line.
        message: String,
    },
    /// A field is out of range.
    #[error("{file}: {field}: {message}")]
    Field {
        /// The file.
        file: String,
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A `[[level]]` is out of range.
    #[error(transparent)]
    Levels(#[from] checkpoint::PlanError),
    /// Neither a preset nor a file.
    #[error("unknown failure preset '{0}' (presets: {presets}; or give a TOML file)", presets = PRESETS.join(", "))]
    Unknown(String),
}

/// The presets `--failures` knows.
pub const PRESETS: [&str; 2] = ["llama3", "philly"];

/// `philly`'s fatal class: the rate (one over the Weibull scale, per job-hour) and the
/// shape (see [`FailureModel::preset`]).
pub const PHILLY_FATAL_PER_JOB_HOUR: f64 = 0.1243;
/// The Weibull shape of `philly`'s fatal class.
pub const PHILLY_FATAL_SHAPE: f64 = 0.3306;

/// Hours of Llama 3's 54-day snapshot, and its GPUs.
const LLAMA3_HOURS: f64 = 54.0 * 24.0;
const LLAMA3_GPUS: f64 = 16_384.0;

impl FailureModel {
    /// A model of `classes` with `restart_s`, 8 GPUs a node, 16 GB of checkpoint per
    /// GPU, the built-in levels under the `risk` rule, and nothing to replay.
    pub fn of(name: &str, restart_s: f64, classes: Vec<FailureClass>) -> FailureModel {
        FailureModel {
            name: name.into(),
            restart_s,
            gpus_per_node: 8,
            checkpoint_gb_per_gpu: 16.0,
            levels: Vec::new(),
            rule: None,
            events: Vec::new(),
            log: None,
            classes,
        }
    }

    /// A preset by name.
    ///
    /// `llama3`: the 419 unexpected interruptions of Llama 3 405B's 54 days on 16,384
    /// H100s (the Llama 3 report's Table 5, `../shared/failures/README.md`), as rates per
    /// GPU-hour by category. GPU faults (268: faulty GPU, HBM3, SRAM, system processor,
    /// silent data corruption, thermal) and host faults (53: unplanned host maintenance,
    /// NIC, SSD, power supply, chassis, IO board, CPU, system memory) lose a node; the
    /// network's 35 (switch or cable) take one node out too; software and dependency
    /// bugs and NCCL watchdog timeouts (63) kill the processes. Restart is 10 minutes
    /// (an assumption: the report gives none), repair 24 hours.
    ///
    /// `philly`: the failed jobs of Microsoft's Philly cluster, 30.5 % of its jobs
    /// holding 38.6 % of its GPU time (AcmeTrace's `cluster_summary.csv`, recomputed
    /// from the public trace). Most are the jobs' own errors, so one fatal class: a
    /// job's running time to it is Weibull with shape 0.3306 and a scale of 8.05 hours
    /// (1/0.1243), the pair at which, over the 82,247 run times and sizes of
    /// `../shared/traces/philly/philly.csv`, both shares come out in expectation
    /// (worked in closed form). A shape below 1 puts most failures early in a job's
    /// life, as Philly's are; a constant rate fit to the GPU time alone fails only
    /// 3.5 % of the jobs.
    pub fn preset(name: &str) -> Option<FailureModel> {
        let per_gpu_hour = |n: f64| n / (LLAMA3_HOURS * LLAMA3_GPUS);
        let class = |name: &str, kind, n| FailureClass {
            name: name.into(),
            kind,
            per: Per::Gpu,
            rate_per_hour: per_gpu_hour(n),
            repair_hours: if kind == Kind::Process { 0.0 } else { 24.0 },
            shape: None,
        };
        match name {
            "llama3" => Some(FailureModel::of(
                "llama3",
                600.0,
                vec![
                    class("gpu", Kind::Node, 268.0),
                    class("host", Kind::Node, 53.0),
                    class("network", Kind::Node, 35.0),
                    class("software", Kind::Process, 63.0),
                ],
            )),
            "philly" => Some(FailureModel::of(
                "philly",
                0.0,
                vec![FailureClass {
                    name: "job-error".into(),
                    kind: Kind::Fatal,
                    per: Per::Job,
                    rate_per_hour: PHILLY_FATAL_PER_JOB_HOUR,
                    repair_hours: 0.0,
                    shape: Some(PHILLY_FATAL_SHAPE),
                }],
            )),
            _ => None,
        }
    }

    /// A preset's name, or the TOML text of a file named `file`.
    pub fn parse(text: &str, file: &str) -> Result<FailureModel, FailureError> {
        let m: FailureModel = toml::from_str(text).map_err(|e| FailureError::Parse {
            file: file.into(),
            message: e.to_string().trim().to_string(),
        })?;
        let mut m = m;
        if m.name.is_empty() {
            m.name = file.into();
        }
        m.check(file)?;
        Ok(m)
    }

    fn check(&self, file: &str) -> Result<(), FailureError> {
        let bad = |field: String, message: &str| FailureError::Field {
            file: file.into(),
            field,
            message: message.into(),
        };
        if !(self.restart_s.is_finite() && (0.0..=1e7).contains(&self.restart_s)) {
            return Err(bad("restart_s".into(), "must be seconds, 0 to 10^7"));
        }
        if self.gpus_per_node == 0 {
            return Err(bad("gpus_per_node".into(), "must be at least 1"));
        }
        // At most 10^6 GB: a job's checkpoint (up to 2^32 GPUs) stays a finite size.
        if !(self.checkpoint_gb_per_gpu > 0.0 && self.checkpoint_gb_per_gpu <= 1e6) {
            return Err(bad(
                "checkpoint_gb_per_gpu".into(),
                "must be GB above 0, at most 10^6",
            ));
        }
        if self.classes.is_empty() {
            return Err(bad("class".into(), "give at least one [[class]]"));
        }
        if !self.levels.is_empty() {
            checkpoint::check_levels(&self.levels, file)?;
        }
        if let Some(r) = &self.rule {
            r.parse::<checkpoint::Rule>()
                .map_err(|e| bad("rule".into(), &e))?;
        }
        for (i, e) in self.events.iter().enumerate() {
            self.check_event(e)
                .map_err(|m| bad(format!("event[{i}]"), &m))?;
        }
        for (i, c) in self.classes.iter().enumerate() {
            if !(c.rate_per_hour.is_finite() && (0.0..=1e3).contains(&c.rate_per_hour)) {
                return Err(bad(
                    format!("class[{i}].rate_per_hour"),
                    "must be 0 to 1,000 failures an hour of one GPU, node or job",
                ));
            }
            if !(c.repair_hours.is_finite() && (0.0..=1e6).contains(&c.repair_hours)) {
                return Err(bad(
                    format!("class[{i}].repair_hours"),
                    "must be 0 to 10^6 hours",
                ));
            }
            if let Some(k) = c.shape {
                if !(k.is_finite() && (0.05..=20.0).contains(&k)) {
                    return Err(bad(format!("class[{i}].shape"), "must be 0.05 to 20"));
                }
                if c.kind != Kind::Fatal || c.per != Per::Job {
                    return Err(bad(
                        format!("class[{i}].shape"),
                        "only a fatal class counted per job has a shape (its failures \
                         end the job, so its time to one runs from the job's start)",
                    ));
                }
            }
            if self.classes[..i].iter().any(|o| o.name == c.name) {
                return Err(bad(format!("class[{i}].name"), "repeated"));
            }
        }
        Ok(())
    }

    fn check_event(&self, e: &Event) -> Result<(), String> {
        if !(e.at_s.is_finite() && (0.0..=1e12).contains(&e.at_s)) {
            return Err(format!("at_s {} is not seconds from 0 to 10^12", e.at_s));
        }
        if !self.classes.iter().any(|c| c.name == e.class) {
            return Err(format!("no class '{}'", e.class));
        }
        if e.node.is_some() == e.gpu.is_some() {
            return Err("name one node or one gpu".into());
        }
        if e.repair_s
            .is_some_and(|r| !(r.is_finite() && (0.0..=1e12).contains(&r)))
        {
            return Err("repair_s is not seconds from 0 to 10^12".into());
        }
        Ok(())
    }

    /// Reads the CSV incident log `text` of file `file` (`time_s,component,class` and
    /// an optional `repair_s`, a header first) and adds its rows to the events, which
    /// it keeps in time order.
    pub fn add_log(&mut self, text: &str, file: &str) -> Result<(), FailureError> {
        let mut lines = text.lines().enumerate();
        let header: Vec<&str> = match lines.next() {
            Some((_, h)) => h.split(',').map(str::trim).collect(),
            None => Vec::new(),
        };
        let col = |name: &str| header.iter().position(|h| *h == name);
        let (Some(t), Some(c), Some(k)) = (col("time_s"), col("component"), col("class")) else {
            return Err(FailureError::Field {
                file: file.into(),
                field: "line 1".into(),
                message: "the header names time_s, component and class (and repair_s)".into(),
            });
        };
        let r = col("repair_s");
        for (i, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            let bad = |field: &str, message: String| FailureError::Field {
                file: file.into(),
                field: format!("line {}: {field}", i + 1),
                message,
            };
            let cell = |n: usize, field: &str| {
                cells
                    .get(n)
                    .copied()
                    .ok_or_else(|| bad(field, "missing".into()))
            };
            let at_s: f64 = cell(t, "time_s")?
                .parse()
                .map_err(|_| bad("time_s", format!("'{}' is not seconds", cells[t])))?;
            let comp = cell(c, "component")?;
            let number = |s: &str| {
                s.parse::<u32>()
                    .map_err(|_| bad("component", format!("'{comp}': give node:N or gpu:N")))
            };
            let (node, gpu) = match comp.split_once(':') {
                Some(("node", n)) => (Some(number(n)?), None),
                Some(("gpu", g)) => (None, Some(number(g)?)),
                _ => return Err(bad("component", format!("'{comp}': give node:N or gpu:N"))),
            };
            let repair_s = match r.and_then(|r| cells.get(r)).filter(|v| !v.is_empty()) {
                Some(v) => Some(
                    v.parse()
                        .map_err(|_| bad("repair_s", format!("'{v}' is not seconds")))?,
                ),
                None => None,
            };
            let e = Event {
                at_s,
                class: cell(k, "class")?.to_string(),
                node,
                gpu,
                repair_s,
            };
            self.check_event(&e).map_err(|m| bad("event", m))?;
            self.events.push(e);
        }
        self.events.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        Ok(())
    }

    /// Failures per hour of class `c` for a job on `gpus` GPUs.
    pub fn job_rate(&self, c: &FailureClass, gpus: u32) -> f64 {
        match c.per {
            Per::Gpu => c.rate_per_hour * f64::from(gpus),
            Per::Node => c.rate_per_hour * f64::from(gpus.div_ceil(self.gpus_per_node)),
            Per::Job => c.rate_per_hour,
        }
    }

    /// Failures per hour of class `c` that a job on `gpus` GPUs recovers from (a fatal
    /// class's end it instead: 0).
    pub fn recoverable_rate(&self, c: &FailureClass, gpus: u32) -> f64 {
        if c.kind == Kind::Fatal {
            0.0
        } else {
            self.job_rate(c, gpus)
        }
    }

    /// Failures per hour of any class for a job on `gpus` GPUs.
    pub fn total_rate(&self, gpus: u32) -> f64 {
        self.classes.iter().map(|c| self.job_rate(c, gpus)).sum()
    }
}

/// What failures did to a simulated run, for its summary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FailureReport {
    /// The failure model's name.
    pub model: String,
    /// Failures that hit something (a running job, or a node taken down), by class.
    pub by_class: Vec<(String, u64)>,
    /// Jobs' attempts ended by a failure (a node failure ends every job on the node).
    pub job_failures: u64,
    /// GPU-ms of work done and lost, redone after restoring.
    pub rework_gpu_ms: f64,
    /// GPU-ms of restoring and restarting after failures.
    pub recovery_gpu_ms: f64,
    /// GPU-ms of jobs stalled saving checkpoints.
    pub checkpoint_gpu_ms: f64,
    /// GPU-ms of GPUs down for repair.
    pub down_gpu_ms: f64,
    /// Jobs a fatal failure ended.
    pub fatal_jobs: u64,
    /// GPU-ms those jobs had held, over all their attempts.
    pub fatal_gpu_ms: f64,
    /// GPU-ms of work kept: each job's GPUs times the work it finished (its reference
    /// work, at the GPUs it asked for).
    pub useful_gpu_ms: f64,
    /// GPU-ms that jobs held.
    pub allocated_gpu_ms: f64,
    /// When the run began, ms.
    pub start: u64,
    /// (ms, failures so far, GPUs down) at every failure that struck and every
    /// repair: the report's timeline.
    pub timeline: Vec<(u64, u64, u64)>,
}

impl FailureReport {
    /// The share of the GPU time jobs held that failures and checkpoints did not take:
    /// rework, restores and restarts, and checkpoint stalls.
    pub fn goodput(&self) -> f64 {
        if self.allocated_gpu_ms > 0.0 {
            let lost = self.rework_gpu_ms + self.recovery_gpu_ms + self.checkpoint_gpu_ms;
            (1.0 - lost / self.allocated_gpu_ms).clamp(0.0, 1.0)
        } else {
            1.0
        }
    }

    /// The share of the GPU time jobs held that went to jobs a fatal failure ended
    /// (AcmeTrace's "failed" share of GPU time); none without fatal failures.
    pub fn failed_gpu_share(&self) -> Option<f64> {
        (self.fatal_jobs > 0 && self.allocated_gpu_ms > 0.0)
            .then(|| self.fatal_gpu_ms / self.allocated_gpu_ms)
    }

    /// GPU-hours lost to failures: rework, restore and restart.
    pub fn lost_gpu_hours(&self) -> f64 {
        (self.rework_gpu_ms + self.recovery_gpu_ms) / 3.6e6
    }

    /// Failures that hit something, all classes.
    pub fn total(&self) -> u64 {
        self.by_class.iter().map(|c| c.1).sum()
    }
}

#[cfg(test)]
mod tests;
