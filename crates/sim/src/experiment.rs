//! One experiment as `apiary simulate` and `apiary compare` set it up, shared with tests
//! and other front ends so that they get the same numbers: a cluster by name, a trace
//! read for that cluster, a speed model by name, and the jobs completed with what the
//! policy or the speed model reads but the trace lacks. The front end adds flags,
//! progress and printing; everything here decides results.

use std::path::{Path, PathBuf};

use apiary_comm::PlacementError;
use apiary_model::{Cluster, ClusterSpec, ClusterSpecError, Job};
use apiary_policy::{Capability, Policy};
use apiary_trace::{ReadOptions, TraceError, speed};

use crate::{CommModel, DurationModel, SpreadModel, Throughput};

/// Why an experiment could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A cluster file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The cluster spec is wrong.
    #[error(transparent)]
    Cluster(#[from] ClusterSpecError),
    /// A speed table could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The `comm` speed model cannot price this cluster's placements.
    #[error("speed model comm: {0}")]
    Comm(#[from] PlacementError),
    /// An unknown speed model.
    #[error("the speed model must be trace, gavel[:GPU], pollux or comm (got '{0}')")]
    UnknownSpeed(String),
    /// A speed model whose table was not given and not found.
    #[error("speed model {model} needs {what}: give it with --speed-data")]
    SpeedData {
        /// The model.
        model: &'static str,
        /// The data it reads.
        what: &'static str,
    },
    /// The factor for models a speed table lacks is out of range.
    #[error("the speed factor for unknown models must be in (0, 1] (got {0})")]
    SpeedUnknown(f64),
    /// A setting's `io.KEY` parameter is wrong.
    #[error(transparent)]
    Storage(#[from] apiary_model::io::StorageError),
    /// A setting's `cpu.KEY` parameter is wrong.
    #[error(transparent)]
    Cpus(#[from] apiary_model::cpu::CpuPoolError),
}

/// Takes a setting's `io.KEY` and `cpu.KEY` parameters out of `params` and lays them
/// over `cfg`'s storage and CPU pool (their defaults where the run has none), so that
/// one comparison can put each policy beside its own cache system, as SiloD's
/// evaluation does (`sjf:io.cache=uniform`).
pub fn resource_params(
    params: &mut apiary_policy::Params,
    cfg: &mut crate::Config,
) -> Result<(), ExperimentError> {
    let take = |params: &mut apiary_policy::Params, prefix: &str| -> Option<String> {
        let keys: Vec<String> = params
            .0
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        (!keys.is_empty()).then(|| {
            keys.iter()
                .map(|k| {
                    let v = params.0.remove(k).unwrap_or_default();
                    format!("{}={v}", &k[prefix.len()..])
                })
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    if let Some(io) = take(params, "io.") {
        cfg.io = Some(cfg.io.unwrap_or_default().with(&io)?);
    }
    if let Some(cpu) = take(params, "cpu.") {
        cfg.cpu = Some(cfg.cpu.unwrap_or_default().with(&cpu)?);
    }
    Ok(())
}

/// A cluster by name: a preset (`n64g8`, `philly`, ...), a `.toml` spec or a peer
/// simulator's `.csv`.
pub fn load_cluster(name: &str) -> Result<(ClusterSpec, Cluster), ExperimentError> {
    let p = Path::new(name);
    if p.is_file() {
        let text = std::fs::read_to_string(p).map_err(|source| ExperimentError::Read {
            path: p.to_path_buf(),
            source,
        })?;
        let spec = if name.ends_with(".csv") {
            ClusterSpec::from_peer_csv_str(&text, name)?
        } else {
            ClusterSpec::from_toml_str(&text, name)?
        };
        let c = spec.build_from(name)?;
        Ok((spec, c))
    } else {
        let spec = ClusterSpec::preset(name)?;
        let c = spec.build()?;
        Ok((spec, c))
    }
}

/// Reading options for a run on `cluster`: ElasticFlow traces on a T4 cluster take the
/// T4 tables unless told otherwise.
pub fn read_options_for(opts: &ReadOptions, cluster: &Cluster) -> ReadOptions {
    let mut o = opts.clone();
    if o.elasticflow_gpu.is_none()
        && cluster
            .nodes
            .first()
            .is_some_and(|n| n.gpu_type.eq_ignore_ascii_case("t4"))
    {
        o.elasticflow_gpu = Some("T4".into());
    }
    o
}

/// A speed model by name, as `--speed` gives it.
#[derive(Clone, Debug)]
pub struct SpeedChoice {
    /// `trace`, `gavel[:k80|p100|v100]`, `pollux` or `comm`.
    pub model: String,
    /// The table the model reads (found beside `../shared/traces` when `None`).
    pub data: Option<PathBuf>,
    /// The factor for a multi-node placement of a model the table lacks.
    pub unknown: f64,
}

impl SpeedChoice {
    /// Whether this is the `comm` model (which needs every job to have a model).
    pub fn is_comm(&self) -> bool {
        self.model == "comm"
    }
}

/// The throughput model `choice` names, and a line saying which table it read, if any.
/// `trace` is the trace file, whose directory is where peer tables are looked for.
pub fn throughput(
    choice: &SpeedChoice,
    trace: Option<&Path>,
    cluster: &Cluster,
) -> Result<(Box<dyn Throughput>, Option<String>), ExperimentError> {
    let unknown = choice.unknown;
    if !(unknown.is_finite() && unknown > 0.0 && unknown <= 1.0) {
        return Err(ExperimentError::SpeedUnknown(unknown));
    }
    let (kind, arg) = choice
        .model
        .split_once(':')
        .unwrap_or((choice.model.as_str(), ""));
    let start = trace.and_then(Path::parent);
    let mut table = match kind {
        "trace" => return Ok((Box::new(DurationModel), None)),
        "comm" => return Ok((Box::new(CommModel::new(cluster)?), None)),
        "gavel" => {
            let worker = if arg.is_empty() { "v100" } else { arg };
            let path = choice
                .data
                .clone()
                .or_else(|| speed::find_peer_file(start, "peers/gavel/simulation_throughputs.json"))
                .ok_or(ExperimentError::SpeedData {
                    model: "gavel",
                    what: "Gavel's simulation_throughputs.json",
                })?;
            speed::gavel_spread(&path, worker)?
        }
        "pollux" => {
            let path = choice
                .data
                .clone()
                .or_else(|| speed::find_peer_file(start, "peers/pollux"))
                .ok_or(ExperimentError::SpeedData {
                    model: "pollux",
                    what: "Pollux's profile directory",
                })?;
            speed::pollux_spread(&path)?
        }
        _ => return Err(ExperimentError::UnknownSpeed(choice.model.clone())),
    };
    table.unknown = unknown;
    let note = format!("speed: {} ({} factors)", table.source, table.len());
    Ok((Box::new(SpreadModel(table)), Some(note)))
}

/// Gives jobs what `policy` or the speed model reads and the trace lacks, drawn from
/// Muri's profile table by job id and `seed`: a model (for the `comm` speed model's
/// allreduce) and stage times (for a policy with the `profiles` capability). Returns a
/// line for each kind drawn, saying how many.
pub fn complete_jobs(
    policy: &dyn Policy,
    speed: &SpeedChoice,
    jobs: &mut [Job],
    seed: u64,
) -> Vec<String> {
    let mut notes = Vec::new();
    if speed.is_comm() {
        let mut drawn = 0;
        for j in jobs.iter_mut().filter(|j| j.model.is_none()) {
            j.model = Some(apiary_model::profiles::draw(&j.id, seed).to_string());
            drawn += 1;
        }
        if drawn > 0 {
            notes.push(format!(
                "--speed comm: {drawn} jobs without a model were given one drawn from Muri's \
                 profile table (seed {seed}; docs/comm.md)"
            ));
        }
    }
    if policy.capabilities().has(Capability::Profiles) {
        let drawn = apiary_model::profiles::assign(jobs, seed);
        if drawn > 0 {
            notes.push(format!(
                "{}: {drawn} jobs without stage times or a known model were given one \
                 drawn from Muri's profile table (seed {seed}; docs/policies/muri.md)",
                policy.name()
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(model: &str) -> SpeedChoice {
        SpeedChoice {
            model: model.into(),
            data: None,
            unknown: 1.0,
        }
    }

    #[test]
    fn a_setting_carries_its_own_storage_and_cpus() {
        let mut p = apiary_policy::Params::from_pairs([
            "io.cache=uniform",
            "io.bandwidth_mbs_per_gpu=5",
            "cpu.cpus_per_gpu=6",
            "backfill=true",
        ])
        .unwrap();
        let mut cfg = crate::Config {
            io: Some(apiary_model::io::Storage::parse("cache_gb_per_gpu=10").unwrap()),
            ..crate::Config::default()
        };
        resource_params(&mut p, &mut cfg).unwrap();
        // Only the policy's own parameter is left for it.
        assert_eq!(p.0.keys().collect::<Vec<_>>(), ["backfill"]);
        let io = cfg.io.unwrap();
        assert_eq!(io.cache, apiary_model::io::CacheMode::Uniform);
        assert_eq!(io.bandwidth_per_gpu, 5e6);
        // The run's own setting stays under the setting's.
        assert_eq!(io.cache_per_gpu, 10e9);
        assert_eq!(cfg.cpu.unwrap().cpus_per_gpu, 6.0);
        let mut bad = apiary_policy::Params::from_pairs(["io.cache=fifo"]).unwrap();
        let e = resource_params(&mut bad, &mut crate::Config::default()).unwrap_err();
        assert!(e.to_string().contains("lru, uniform or coordl"), "{e}");
        // Nothing to take: nothing changes.
        let mut none = apiary_policy::Params::default();
        let mut cfg = crate::Config::default();
        resource_params(&mut none, &mut cfg).unwrap();
        assert!(cfg.io.is_none() && cfg.cpu.is_none());
    }

    #[test]
    fn speed_models_are_named_and_checked() {
        let (_, c) = load_cluster("n2g4").unwrap();
        assert!(throughput(&choice("trace"), None, &c).unwrap().1.is_none());
        let e = throughput(&choice("fast"), None, &c).err().unwrap();
        assert!(e.to_string().contains("got 'fast'"), "{e}");
        let mut bad = choice("trace");
        bad.unknown = 0.0;
        let e = throughput(&bad, None, &c).err().unwrap();
        assert!(e.to_string().contains("(0, 1]"), "{e}");
    }

    #[test]
    fn a_t4_cluster_reads_elasticflow_traces_with_t4_tables() {
        let mut spec = ClusterSpec::preset("n2g4").unwrap();
        spec.switches[0].nodes[0].gpu_type = "T4".into();
        let c = spec.build().unwrap();
        let o = read_options_for(&ReadOptions::default(), &c);
        assert_eq!(o.elasticflow_gpu.as_deref(), Some("T4"));
        let (_, v100) = load_cluster("n2g4").unwrap();
        assert_eq!(
            read_options_for(&ReadOptions::default(), &v100).elasticflow_gpu,
            None
        );
    }

    #[test]
    fn jobs_get_what_the_policy_reads_and_say_so() {
        let mut jobs = vec![Job::new("a", 0, 1, 1000), Job::new("b", 0, 1, 1000)];
        let muri = apiary_policy::registry::build("muri-s", &Default::default()).unwrap();
        let muri = muri.as_ref();
        let notes = complete_jobs(muri, &choice("trace"), &mut jobs, 0);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("muri-s: 2 jobs"), "{notes:?}");
        assert!(jobs.iter().all(|j| j.extras().stages.is_some()));
        // A drawn model is a known model: its stage times need no second draw.
        let mut jobs = vec![Job::new("a", 0, 1, 1000)];
        let notes = complete_jobs(muri, &choice("comm"), &mut jobs, 0);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("--speed comm: 1 jobs"), "{notes:?}");
        assert!(jobs[0].model.is_some() && jobs[0].extras().stages.is_some());
        let fifo = apiary_policy::registry::build("fifo", &Default::default()).unwrap();
        let fifo = fifo.as_ref();
        let mut plain = vec![Job::new("a", 0, 1, 1000)];
        assert!(complete_jobs(fifo, &choice("trace"), &mut plain, 0).is_empty());
        assert!(plain[0].model.is_none());
    }
}
