//! The sweep file: TOML naming the traces, clusters, loads, policy settings, seeds,
//! metrics and simulator options of a sweep. Unknown keys are errors, so a misspelt
//! axis fails loudly instead of silently running a smaller sweep.

use apiary_llm::metrics::METRICS as LLM_METRICS;
use apiary_model::time::secs_f64;
use apiary_policy::{Params, registry};
use apiary_report::vc::VC_METRICS;
use apiary_report::{METRICS, Percentile};
use apiary_share::experiment::METRICS as SHARE_METRICS;
use apiary_sim::{Config, Mode};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a sweep could not be read, planned or run.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The sweep file is not valid TOML for a sweep (the message names line and key).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A field of the sweep file has a value that cannot work.
    #[error("{path}: {field}: {message}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The field, as `policy[2].grid.starvation`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A results folder cannot be used as asked.
    #[error("{dir}: {message}")]
    Folder {
        /// The folder.
        dir: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A results file is not one this sweep wrote.
    #[error("{path}:{line}: {message}")]
    Results {
        /// The file.
        path: PathBuf,
        /// Its line.
        line: u64,
        /// What is wrong.
        message: String,
    },
}

/// A value in a parameter grid: TOML numbers, strings and booleans all become the text
/// `--set` would take.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum GridValue {
    /// A number or boolean.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// Text.
    Text(String),
}

impl GridValue {
    fn text(&self) -> String {
        match self {
            GridValue::Int(i) => i.to_string(),
            GridValue::Float(f) => f.to_string(),
            GridValue::Bool(b) => b.to_string(),
            GridValue::Text(s) => s.clone(),
        }
    }
}

/// `seeds = 5` (0 to 4) or `seeds = [0, 7, 9]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum Seeds {
    Count(u64),
    List(Vec<u64>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceFile {
    path: PathBuf,
    name: Option<String>,
    format: Option<String>,
    sample: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    name: String,
    #[serde(default)]
    set: BTreeMap<String, GridValue>,
    #[serde(default)]
    grid: BTreeMap<String, Vec<GridValue>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SimFile {
    mode: Option<String>,
    restart_overhead: Option<f64>,
    per_event_overhead: Option<bool>,
    percentile: Option<String>,
    speed: Option<String>,
    speed_data: Option<PathBuf>,
    carbon: Option<String>,
    pue: Option<f64>,
    io: Option<String>,
    cpu: Option<String>,
    power_limit: Option<f64>,
    online: Option<String>,
    /// Failures: a preset, else a TOML file relative to the sweep file.
    #[serde(default)]
    failures: Option<String>,
}

impl SimFile {
    /// Whether any option is given.
    fn given(&self) -> bool {
        let SimFile {
            mode,
            restart_overhead,
            per_event_overhead,
            percentile,
            speed,
            speed_data,
            carbon,
            pue,
            io,
            cpu,
            power_limit,
            online,
            failures,
        } = self;
        mode.is_some()
            || restart_overhead.is_some()
            || per_event_overhead.is_some()
            || percentile.is_some()
            || speed.is_some()
            || speed_data.is_some()
            || carbon.is_some()
            || pue.is_some()
            || io.is_some()
            || cpu.is_some()
            || power_limit.is_some()
            || online.is_some()
            || failures.is_some()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    name: Option<String>,
    seeds: Option<Seeds>,
    loads: Option<Vec<f64>>,
    metrics: Option<Vec<String>>,
    #[serde(default)]
    per_vc: Vec<String>,
    baseline: Option<String>,
    #[serde(default)]
    clusters: Vec<String>,
    trace: Vec<TraceFile>,
    policy: Vec<PolicyFile>,
    #[serde(default)]
    sim: SimFile,
    /// An LLM-serving sweep's set-up ([`crate::llm`]).
    llm: Option<crate::llm::LlmFile>,
}

/// A trace of the sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSpec {
    /// Its label in results.
    pub name: String,
    /// The file, resolved against the sweep file's folder.
    pub path: PathBuf,
    /// Its format, when not detected.
    pub format: Option<String>,
    /// Jobs drawn from it per seed (without replacement, in trace order); all when
    /// `None`.
    pub sample: Option<usize>,
}

/// One policy with one set of parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySetting {
    /// `policy` or `policy:key=value,key=value`, the label in results.
    pub label: String,
    /// The policy.
    pub policy: String,
    /// Its parameters, `key=value`.
    pub params: Vec<String>,
}

/// A sweep as read and checked.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// Its name (the file's stem unless given).
    pub name: String,
    /// Seeds of every cell.
    pub seeds: Vec<u64>,
    /// Arrival-rate multipliers (submission times are divided by each).
    pub loads: Vec<f64>,
    /// Metrics collected, from [`METRICS`].
    pub metrics: Vec<String>,
    /// Metrics collected per VC as well (from [`VC_METRICS`]), into `vc-results.csv`;
    /// none unless the sweep file asks.
    pub per_vc: Vec<String>,
    /// The setting ratios are taken against.
    pub baseline: Option<String>,
    /// Cluster names or files, as the sweep file gives them (their labels in results).
    pub clusters: Vec<String>,
    /// What each cluster is read from: a file resolved against the sweep file's folder,
    /// or the preset's name.
    pub cluster_sources: Vec<String>,
    /// Traces.
    pub traces: Vec<TraceSpec>,
    /// Policy settings, grids expanded.
    pub settings: Vec<PolicySetting>,
    /// Simulator options of every cell.
    pub config: Config,
    /// Percentile definition.
    pub percentile: Percentile,
    /// Job speed model, as `apiary simulate --speed`.
    pub speed: String,
    /// Its data, resolved against the sweep file's folder.
    pub speed_data: Option<PathBuf>,
    /// For a sweep of GPU-sharing policies (every setting one of them): how pods meet
    /// the cluster, from `[sim] mode` (`fill:RATIO` or `event`).
    pub sharing: Option<apiary_share::Mode>,
    /// For an LLM-serving sweep (`[llm]`): its set-up; its clusters are instance
    /// counts and its loads request rates.
    pub llm: Option<crate::llm::LlmSweep>,
}

impl Sweep {
    /// Whether the load axis holds request rates (an LLM sweep's `rates`).
    pub fn loads_are_rates(&self) -> bool {
        self.llm.as_ref().is_some_and(|l| l.rates)
    }

    /// What the load axis holds, in a word: `load` or `rate`.
    pub fn load_word(&self) -> &'static str {
        if self.loads_are_rates() {
            "rate"
        } else {
            "load"
        }
    }

    /// The load axis's label on charts.
    pub fn load_label(&self) -> &'static str {
        if self.loads_are_rates() {
            "rate (requests/s)"
        } else {
            "load (x the trace's arrival rate)"
        }
    }
}

/// The most cells a sweep may plan, and seeds it may list: far more than any machine
/// runs, and few enough that planning never exhausts memory.
const MAX_CELLS: u64 = 10_000_000;
/// The most settings one policy's grid may expand to (each is checked by building it).
const MAX_GRID: u64 = 10_000;

/// Refuses a sweep of more than [`MAX_CELLS`] cells.
fn check_cells(path: &Path, axes: [usize; 5]) -> Result<(), SweepError> {
    let n = axes
        .iter()
        .try_fold(1u64, |n, &a| n.checked_mul(a as u64))
        .filter(|&n| n <= MAX_CELLS);
    match n {
        Some(_) => Ok(()),
        None => Err(field(
            path,
            "seeds",
            format!(
                "{} traces x {} clusters x {} loads x {} settings x {} seeds is more than {MAX_CELLS} cells",
                axes[0], axes[1], axes[2], axes[3], axes[4]
            ),
        )),
    }
}

fn field(path: &Path, field: impl Into<String>, message: impl Into<String>) -> SweepError {
    SweepError::Field {
        path: path.to_path_buf(),
        field: field.into(),
        message: message.into(),
    }
}

/// `p` against `base`, with `.` and `..` taken out where they can be (so manifests and
/// logs name `/data/traces/x.csv`, not `/data/sweeps/../traces/x.csv`).
fn resolve(base: &Path, p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in base.join(p).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl Sweep {
    /// Reads and checks the sweep file at `path`.
    pub fn load(path: &Path) -> Result<Sweep, SweepError> {
        let text = std::fs::read_to_string(path).map_err(|source| SweepError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let stem = path
            .file_stem()
            .map_or("sweep".into(), |s| s.to_string_lossy().into_owned());
        Sweep::parse(&text, path, base, &stem)
    }

    /// Checks the sweep file `text` (read from `path`; relative trace paths resolve
    /// against `base`).
    pub fn parse(text: &str, path: &Path, base: &Path, stem: &str) -> Result<Sweep, SweepError> {
        let f: SweepFile = toml::from_str(text).map_err(|e| SweepError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let seeds = match f.seeds.unwrap_or(Seeds::Count(1)) {
            Seeds::Count(0) => return Err(field(path, "seeds", "at least one seed")),
            Seeds::Count(n) if n > MAX_CELLS / 10 => {
                return Err(field(path, "seeds", format!("at most {}", MAX_CELLS / 10)));
            }
            Seeds::Count(n) => (0..n).collect(),
            Seeds::List(v) if v.is_empty() => {
                return Err(field(path, "seeds", "at least one seed"));
            }
            Seeds::List(v) => v,
        };
        let llm_file = f.llm;
        let is_llm = llm_file.is_some();
        let loads = f.loads.clone().unwrap_or_else(|| vec![1.0]);
        if loads.is_empty() {
            return Err(field(path, "loads", "at least one load"));
        }
        for (i, l) in loads.iter().enumerate() {
            if !(l.is_finite() && *l > 0.0 && *l <= 1e6) {
                return Err(field(
                    path,
                    format!("loads[{i}]"),
                    format!("{l} is not a multiplier in (0, 10^6]"),
                ));
            }
        }
        let metrics_given = f.metrics.is_some();
        let metrics = f.metrics.unwrap_or_else(|| {
            if is_llm {
                crate::llm::DEFAULT_METRICS.map(String::from).to_vec()
            } else {
                ["jct_mean", "pending_mean", "util_mean"]
                    .map(String::from)
                    .to_vec()
            }
        });
        // An LLM sweep's figures are a serving run's; the others a training or
        // GPU-sharing run's.
        let known_metrics: Vec<&(&str, &str)> = if is_llm {
            LLM_METRICS.iter().collect()
        } else {
            METRICS.iter().chain(SHARE_METRICS).collect()
        };
        for (i, m) in metrics.iter().enumerate() {
            if !known_metrics.iter().any(|k| k.0 == m) {
                let known: Vec<&str> = known_metrics.iter().map(|k| k.0).collect();
                return Err(field(
                    path,
                    format!("metrics[{i}]"),
                    format!("unknown metric '{m}' (known: {})", known.join(", ")),
                ));
            }
        }
        for (i, m) in f.per_vc.iter().enumerate() {
            if !VC_METRICS.contains(&m.as_str()) {
                return Err(field(
                    path,
                    format!("per_vc[{i}]"),
                    format!(
                        "'{m}' is not a metric of one VC's jobs (those are: {})",
                        VC_METRICS.join(", ")
                    ),
                ));
            }
        }
        if is_llm && !f.clusters.is_empty() {
            return Err(field(
                path,
                "clusters",
                "an LLM sweep's clusters are its [llm] instances",
            ));
        }
        if !is_llm && f.clusters.is_empty() {
            return Err(field(path, "clusters", "at least one cluster"));
        }
        if f.trace.is_empty() {
            return Err(field(path, "trace", "at least one [[trace]]"));
        }
        let mut traces = Vec::new();
        for (i, t) in f.trace.into_iter().enumerate() {
            let resolved = resolve(base, &t.path);
            if t.sample == Some(0) {
                return Err(field(path, format!("trace[{i}].sample"), "at least 1 job"));
            }
            let name = t.name.unwrap_or_else(|| {
                t.path
                    .file_stem()
                    .map_or(format!("trace{i}"), |s| s.to_string_lossy().into_owned())
            });
            if traces.iter().any(|o: &TraceSpec| o.name == name) {
                return Err(field(
                    path,
                    format!("trace[{i}].name"),
                    format!("'{name}' names two traces"),
                ));
            }
            traces.push(TraceSpec {
                name,
                path: resolved,
                format: t.format,
                sample: t.sample,
            });
        }
        let mut settings = Vec::new();
        if f.policy.is_empty() {
            return Err(field(path, "policy", "at least one [[policy]]"));
        }
        for (i, p) in f.policy.iter().enumerate() {
            settings.extend(expand(path, i, p, is_llm)?);
        }
        let mut labels: Vec<&str> = settings.iter().map(|s| s.label.as_str()).collect();
        labels.sort_unstable();
        if let Some(w) = labels.windows(2).find(|w| w[0] == w[1]) {
            return Err(field(
                path,
                "policy",
                format!("the setting '{}' appears twice", w[0]),
            ));
        }
        if let Some(b) = &f.baseline
            && !settings.iter().any(|s| &s.label == b)
        {
            let known: Vec<&str> = settings.iter().map(|s| s.label.as_str()).collect();
            return Err(field(
                path,
                "baseline",
                format!("'{b}' is none of the settings ({})", known.join(", ")),
            ));
        }
        if let Some(l) = llm_file {
            if f.sim.given() {
                return Err(field(path, "sim", "an LLM sweep is set up by [llm] alone"));
            }
            let (llm, loads) = crate::llm::check(path, l, f.loads, &traces)?;
            check_cells(
                path,
                [
                    traces.len(),
                    llm.instances.len(),
                    loads.len(),
                    settings.len(),
                    seeds.len(),
                ],
            )?;
            if !llm.splits.is_empty() && settings.len() != 1 {
                return Err(field(
                    path,
                    "policy",
                    "disaggregated pools schedule themselves: give one [[policy]], whose name labels the rows",
                ));
            }
            let clusters: Vec<String> = llm
                .instances
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    // Disaggregated pools read `2:6x...`.
                    let n = match llm.splits.get(i) {
                        Some((p, d)) => format!("{p}:{d}"),
                        None => n.to_string(),
                    };
                    match llm.options.tp {
                        1 => format!("{n}x{}", llm.options.gpu),
                        tp => format!("{n}x{tp}x{}", llm.options.gpu),
                    }
                })
                .collect();
            return Ok(Sweep {
                name: f.name.unwrap_or_else(|| stem.to_string()),
                seeds,
                loads,
                metrics,
                per_vc: Vec::new(),
                baseline: f.baseline,
                cluster_sources: clusters.clone(),
                clusters,
                traces,
                settings,
                config: Config::default(),
                percentile: Percentile::default(),
                speed: "trace".into(),
                speed_data: None,
                sharing: None,
                llm: Some(llm),
            });
        }
        check_cells(
            path,
            [
                traces.len(),
                f.clusters.len(),
                loads.len(),
                settings.len(),
                seeds.len(),
            ],
        )?;
        let sharing = sharing(path, &f.sim, &settings, &loads, &traces)?;
        let metrics = if sharing.is_some() && !metrics_given {
            vec!["alloc_pct_100".into(), "frag_pct_80".into()]
        } else {
            metrics
        };
        let (config, percentile) = sim_options(path, base, &f.sim, sharing.is_some())?;
        Ok(Sweep {
            name: f.name.unwrap_or_else(|| stem.to_string()),
            seeds,
            loads,
            metrics,
            per_vc: f.per_vc,
            baseline: f.baseline,
            cluster_sources: f
                .clusters
                .iter()
                .map(|c| {
                    let p = resolve(base, Path::new(c));
                    if Path::new(c).is_relative() && p.is_file() {
                        p.to_string_lossy().into_owned()
                    } else {
                        c.clone()
                    }
                })
                .collect(),
            clusters: f.clusters,
            traces,
            settings,
            config,
            percentile,
            speed: f.sim.speed.clone().unwrap_or_else(|| "trace".into()),
            speed_data: f.sim.speed_data.as_ref().map(|p| resolve(base, p)),
            sharing,
            llm: None,
        })
    }
}

/// One policy entry's settings: its fixed `set` and every combination of its `grid`
/// (`llm`: an LLM-serving policy's).
fn expand(
    path: &Path,
    i: usize,
    p: &PolicyFile,
    llm: bool,
) -> Result<Vec<PolicySetting>, SweepError> {
    if !llm && apiary_share::is_share_policy(&p.name) {
        if !p.set.is_empty() || !p.grid.is_empty() {
            return Err(field(
                path,
                format!("policy[{i}]"),
                format!(
                    "'{}' is a GPU-sharing policy and takes no parameters",
                    p.name
                ),
            ));
        }
        return Ok(vec![PolicySetting {
            label: p.name.clone(),
            policy: p.name.clone(),
            params: Vec::new(),
        }]);
    }
    if llm && apiary_llm::policy::POLICIES.find(&p.name).is_none() {
        return Err(field(
            path,
            format!("policy[{i}].name"),
            format!(
                "unknown LLM policy '{}' (see `apiary llm policies`)",
                p.name
            ),
        ));
    }
    if !llm && registry::find(&p.name).is_none() {
        return Err(field(
            path,
            format!("policy[{i}].name"),
            format!("unknown policy '{}' (see `apiary policies`)", p.name),
        ));
    }
    let fixed: Vec<String> = p
        .set
        .iter()
        .map(|(k, v)| format!("{k}={}", v.text()))
        .collect();
    // The grid's size before its combinations are written out.
    let size = p
        .grid
        .values()
        .try_fold(1u64, |n, v| n.checked_mul(v.len().max(1) as u64))
        .filter(|&n| n <= MAX_GRID);
    if size.is_none() {
        return Err(field(
            path,
            format!("policy[{i}].grid"),
            format!("more than {MAX_GRID} settings"),
        ));
    }
    let mut combos: Vec<Vec<String>> = vec![Vec::new()];
    for (k, values) in &p.grid {
        if values.is_empty() {
            return Err(field(
                path,
                format!("policy[{i}].grid.{k}"),
                "an empty list of values",
            ));
        }
        combos = combos
            .iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push(format!("{k}={}", v.text()));
                    c
                })
            })
            .collect();
    }
    let mut out = Vec::new();
    for c in combos {
        let mut params = fixed.clone();
        params.extend(c);
        // A setting's own storage or CPU pool (`io.KEY`, `cpu.KEY`) is checked here,
        // then laid over `[sim]`'s when its cells run.
        let parsed = if llm {
            crate::llm::check_policy(&p.name, &params)
        } else {
            Params::from_pairs(params.iter().map(String::as_str))
                .map_err(|e| e.to_string())
                .and_then(|mut ps| {
                    apiary_sim::experiment::resource_params(&mut ps, &mut Config::default())
                        .map_err(|e| e.to_string())?;
                    registry::build(&p.name, &ps)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
        };
        if let Err(e) = parsed {
            return Err(field(path, format!("policy[{i}]"), e));
        }
        let label = if params.is_empty() {
            p.name.clone()
        } else {
            format!("{}:{}", p.name, params.join(","))
        };
        out.push(PolicySetting {
            label,
            policy: p.name.clone(),
            params,
        });
    }
    Ok(out)
}

/// The GPU-sharing mode of a sweep whose settings are all GPU-sharing policies; `None`
/// for a sweep of training policies. The two kinds place different things and do not
/// mix.
fn sharing(
    path: &Path,
    sim: &SimFile,
    settings: &[PolicySetting],
    loads: &[f64],
    traces: &[TraceSpec],
) -> Result<Option<apiary_share::Mode>, SweepError> {
    let n = settings
        .iter()
        .filter(|s| apiary_share::is_share_policy(&s.policy))
        .count();
    let text = sim.mode.as_deref().unwrap_or("event");
    if n == 0 {
        if text.starts_with("fill:") {
            return Err(field(
                path,
                "sim.mode",
                "fill:RATIO is FGD's experiment, for GPU-sharing policies only",
            ));
        }
        return Ok(None);
    }
    if n < settings.len() {
        return Err(field(
            path,
            "policy",
            "GPU-sharing policies and training policies place different things: sweep each kind on its own",
        ));
    }
    if loads != [1.0] || traces.iter().any(|t| t.sample.is_some()) {
        return Err(field(
            path,
            "loads",
            "GPU-sharing sweeps take pod lists whole: no loads or trace samples",
        ));
    }
    match apiary_share::Mode::parse(text) {
        Some(m) => Ok(Some(m)),
        None => Err(field(
            path,
            "sim.mode",
            format!("'{text}' is not 'fill:RATIO' (0 < RATIO <= 10) or 'event'"),
        )),
    }
}

fn sim_options(
    path: &Path,
    base: &Path,
    s: &SimFile,
    sharing: bool,
) -> Result<(Config, Percentile), SweepError> {
    // A GPU-sharing sweep's mode is its own (checked by `sharing`); the engine's options
    // stay at their defaults.
    let text = if sharing {
        "event"
    } else {
        s.mode.as_deref().unwrap_or("event")
    };
    let Some(mode) = Mode::parse(text) else {
        return Err(field(
            path,
            "sim.mode",
            format!("'{text}' is not 'event' or 'slot:SECONDS' (0.001 to 10^12)"),
        ));
    };
    let Some(restart_overhead) = secs_f64(s.restart_overhead.unwrap_or(0.0)) else {
        return Err(field(path, "sim.restart_overhead", "seconds, 0 to 10^12"));
    };
    let percentile = match s.percentile.as_deref().unwrap_or("nearest") {
        "nearest" => Percentile::NearestRank,
        "floor" => Percentile::Floor,
        p => {
            return Err(field(
                path,
                "sim.percentile",
                format!("'{p}' is not 'nearest' or 'floor'"),
            ));
        }
    };
    let pue = s.pue.unwrap_or(1.0);
    if !(pue.is_finite() && (1.0..=10.0).contains(&pue)) {
        return Err(field(
            path,
            "sim.pue",
            format!("{pue} is not between 1 and 10"),
        ));
    }
    // A grid's name, else a file relative to the sweep file.
    let carbon = match &s.carbon {
        None => None,
        Some(c) => {
            let grid = apiary_trace::carbon::grids().any(|g| g.eq_ignore_ascii_case(c));
            let spec = if grid {
                c.clone()
            } else {
                resolve(base, Path::new(c)).display().to_string()
            };
            let series = apiary_trace::carbon::read_intensity(&spec)
                .map_err(|e| field(path, "sim.carbon", e.to_string()))?;
            Some(std::sync::Arc::new(series))
        }
    };
    let io =
        s.io.as_deref()
            .map(apiary_model::io::Storage::parse)
            .transpose()
            .map_err(|e| field(path, "sim.io", e.to_string()))?;
    let cpu = s
        .cpu
        .as_deref()
        .map(apiary_model::cpu::CpuPool::parse)
        .transpose()
        .map_err(|e| field(path, "sim.cpu", e.to_string()))?;
    let online = s
        .online
        .as_deref()
        .map(apiary_model::online::OnlineLoad::parse)
        .transpose()
        .map_err(|e| field(path, "sim.online", e.to_string()))?;
    let failures = match &s.failures {
        None => None,
        Some(spec) => {
            let model = apiary_trace::failures::load(spec, base)
                .map_err(|e| field(path, "sim.failures", e.to_string()))?;
            Some(
                apiary_sim::failures::Setting::of(model)
                    .map_err(|e| field(path, "sim.failures", format!("rule {e}")))?,
            )
        }
    };
    if let Some(f) = s.power_limit
        && !(f.is_finite() && (0.3..=1.0).contains(&f))
    {
        return Err(field(
            path,
            "sim.power_limit",
            format!("{f} is not a fraction from 0.3 to 1"),
        ));
    }
    Ok((
        Config {
            mode,
            restart_overhead,
            per_event_overhead: s.per_event_overhead.unwrap_or(false),
            seed: 0,
            carbon,
            pue,
            io,
            cpu,
            power_limit: s.power_limit,
            online,
            failures,
        },
        percentile,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Sweep, SweepError> {
        Sweep::parse(text, Path::new("s.toml"), Path::new("/data"), "s")
    }

    const MIN: &str = r#"
clusters = ["n16g8"]
[[trace]]
path = "t.csv"
[[policy]]
name = "fifo"
"#;

    #[test]
    fn gpu_sharing_sweeps_take_fill_mode_and_do_not_mix_kinds() {
        let share = r#"
clusters = ["nodes.csv"]
[[trace]]
path = "pods.csv"
[[policy]]
name = "fgd"
[[policy]]
name = "random"
[sim]
mode = "fill:1.3"
"#;
        let s = parse(share).unwrap();
        assert_eq!(s.sharing, Some(apiary_share::Mode::Fill(1.3)));
        assert_eq!(s.metrics, ["alloc_pct_100", "frag_pct_80"]);
        let event = share.replace("fill:1.3", "event");
        assert_eq!(
            parse(&event).unwrap().sharing,
            Some(apiary_share::Mode::Replay)
        );
        let mixed = format!("{share}\n[[policy]]\nname = \"fifo\"\n");
        let e = parse(&mixed).unwrap_err().to_string();
        assert!(e.contains("sweep each kind on its own"), "{e}");
        let e = parse(&format!("{MIN}\n[sim]\nmode = \"fill:1.3\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("GPU-sharing policies only"), "{e}");
        let e = parse(&share.replace("name = \"fgd\"", "name = \"fgd\"\nset = { x = 1 }"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("takes no parameters"), "{e}");
        let e = parse(&format!("loads = [1, 2]\n{share}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no loads"), "{e}");
        assert!(parse(&share.replace("fill:1.3", "fill:0")).is_err());
        assert!(parse(MIN).unwrap().sharing.is_none());
    }

    #[test]
    fn defaults_and_grids_expand() {
        let s = parse(MIN).unwrap();
        assert_eq!(s.seeds, vec![0]);
        assert_eq!(s.loads, vec![1.0]);
        assert_eq!(s.traces[0].path, Path::new("/data/t.csv"));
        assert_eq!(s.traces[0].name, "t");
        let s = parse(&format!(
            "{MIN}\n[[policy]]\nname = \"tiresias\"\ngrid = {{ starvation = [0, 2.5] }}\n"
        ))
        .unwrap();
        let labels: Vec<&str> = s.settings.iter().map(|x| x.label.as_str()).collect();
        assert_eq!(
            labels,
            ["fifo", "tiresias:starvation=0", "tiresias:starvation=2.5"]
        );
    }

    #[test]
    fn mistakes_name_their_field() {
        let e = parse(&MIN.replace("fifo", "fiffo"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("policy[0].name") && e.contains("fiffo"), "{e}");
        let e = parse(&format!("loads = [1, -2]\n{MIN}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("loads[1]"), "{e}");
        let e = parse(&format!("metrics = [\"jct\"]\n{MIN}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("metrics[0]") && e.contains("jct_mean"), "{e}");
        let e = parse(&format!("seed = 3\n{MIN}")).unwrap_err().to_string();
        assert!(e.contains("unknown field") && e.contains("line 1"), "{e}");
        let e = parse(&format!("{MIN}set = {{ nonsense = 1 }}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("policy[0]") && e.contains("nonsense"), "{e}");
        let e = parse(&format!("baseline = \"srtf\"\n{MIN}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("baseline"), "{e}");
        // Utilisation is the cluster's: no VC has one of its own.
        let e = parse(&format!("per_vc = [\"jct_mean\", \"util_mean\"]\n{MIN}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("per_vc[1]") && e.contains("not a metric of one VC"),
            "{e}"
        );
        assert_eq!(
            parse(&format!("per_vc = [\"jct_mean\"]\n{MIN}"))
                .unwrap()
                .per_vc,
            ["jct_mean"]
        );
    }
}
