//! Running one cell: the trace read once per (trace, cluster) and shared by every cell
//! that needs it, drawn (`sample`) and compressed (`load`) for the cell, then one
//! simulation under the cell's policy setting and seed.

use crate::plan::Cell;
use crate::spec::Sweep;
use apiary_model::{Cluster, Job, Rng};
use apiary_policy::{ParamError, Params, registry};
use apiary_report::Summary;
use apiary_sim::SimError;
use apiary_sim::experiment::{self, ExperimentError, SpeedChoice};
use apiary_trace::{Format, ReadOptions, TraceError};
use std::sync::{Arc, OnceLock};

/// Why a cell did not run.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    /// The cluster could not be set up.
    #[error("cluster: {0}")]
    Cluster(Arc<ExperimentError>),
    /// The speed model could not be set up.
    #[error("speed model: {0}")]
    Speed(#[from] ExperimentError),
    /// The trace could not be read.
    #[error("trace: {0}")]
    Trace(Arc<TraceError>),
    /// The trace's format is not one apiary reads.
    #[error("trace format '{0}' is unknown (one of: {names})", names = Format::names())]
    Format(String),
    /// The policy setting does not build.
    #[error("policy: {0}")]
    Policy(#[from] ParamError),
    /// The simulation failed.
    #[error("simulation: {0}")]
    Sim(#[from] SimError),
    /// A GPU-sharing cell's pods or nodes could not be read or set up.
    #[error("GPU sharing: {0}")]
    Sharing(Arc<String>),
    /// An LLM cell's trace could not be read.
    #[error("trace: {0}")]
    LlmTrace(Arc<apiary_llm::LlmError>),
    /// An LLM cell could not be set up or run.
    #[error("LLM serving: {0}")]
    Llm(#[from] apiary_llm::LlmError),
}

type Shared<T, E> = OnceLock<Result<Arc<T>, Arc<E>>>;

/// What cells share: clusters and traces, each read the first time a cell needs it.
pub struct Inputs<'a> {
    sweep: &'a Sweep,
    clusters: Vec<Shared<Cluster, ExperimentError>>,
    /// Per trace and cluster (the cluster can change how a trace is read).
    traces: Vec<Shared<Vec<Job>, TraceError>>,
    /// GPU-sharing pods on nodes, per trace and cluster.
    sharing: Vec<Shared<ShareInput, String>>,
    /// LLM request traces, per trace.
    llm_traces: Vec<Shared<apiary_llm::workload::Trace, apiary_llm::LlmError>>,
}

/// A pod list on a node list, ready to place.
struct ShareInput {
    pods: Vec<apiary_model::share::Pod>,
    prep: apiary_share::Prepared,
    typical: Vec<apiary_share::Typical>,
}

impl<'a> Inputs<'a> {
    /// Nothing read yet.
    pub fn new(sweep: &'a Sweep) -> Inputs<'a> {
        let n = sweep.traces.len() * sweep.clusters.len();
        Inputs {
            sweep,
            clusters: (0..sweep.clusters.len()).map(|_| OnceLock::new()).collect(),
            traces: (0..n).map(|_| OnceLock::new()).collect(),
            sharing: (0..n).map(|_| OnceLock::new()).collect(),
            llm_traces: (0..sweep.traces.len()).map(|_| OnceLock::new()).collect(),
        }
    }

    fn run_llm(&self, cell: &Cell, l: &crate::llm::LlmSweep) -> Result<CellOutcome, CellError> {
        let s = self.sweep;
        let trace = self.llm_traces[cell.trace]
            .get_or_init(|| {
                apiary_llm::workload::read_trace(&s.traces[cell.trace].path)
                    .map(Arc::new)
                    .map_err(Arc::new)
            })
            .clone()
            .map_err(CellError::LlmTrace)?;
        let setting = &s.settings[cell.setting];
        let sum = crate::llm::run(
            l,
            &trace,
            cell.cluster,
            cell.load,
            &setting.policy,
            &setting.params,
            cell.seed,
        )?;
        Ok(CellOutcome {
            measured: Measured::Llm(Box::new(sum)),
            vcs: Vec::new(),
        })
    }

    fn share_input(&self, t: usize, c: usize) -> Result<Arc<ShareInput>, CellError> {
        self.sharing[t * self.sweep.clusters.len() + c]
            .get_or_init(|| {
                let read = || -> Result<ShareInput, String> {
                    let nodes_file = std::path::Path::new(&self.sweep.cluster_sources[c]);
                    let nodes = apiary_trace::openb::read_nodes(nodes_file).map_err(|e| {
                        format!(
                            "cluster {}: an openb node list is needed: {e}",
                            nodes_file.display()
                        )
                    })?;
                    let pods = apiary_trace::openb::read_pods(&self.sweep.traces[t].path)
                        .map_err(|e| e.to_string())?;
                    let prep =
                        apiary_share::Prepared::new(&nodes, &pods).map_err(|e| e.to_string())?;
                    // FGD's typical pods cover 95 % of the workload's pods.
                    let typical = apiary_share::workload_typical(&prep, 95.0);
                    Ok(ShareInput {
                        pods,
                        prep,
                        typical,
                    })
                };
                read().map(Arc::new).map_err(Arc::new)
            })
            .clone()
            .map_err(CellError::Sharing)
    }

    fn run_sharing(&self, cell: &Cell, mode: apiary_share::Mode) -> Result<CellOutcome, CellError> {
        let inp = self.share_input(cell.trace, cell.cluster)?;
        let policy = apiary_share::build(
            &self.sweep.settings[cell.setting].policy,
            &Params::default(),
        )?;
        let out = apiary_share::run(
            &inp.prep,
            &inp.pods,
            inp.typical.clone(),
            policy,
            mode,
            cell.seed,
        )
        .map_err(|e| CellError::Sharing(Arc::new(e.to_string())))?;
        Ok(CellOutcome {
            measured: Measured::Sharing(apiary_share::Figures::of(&out)),
            vcs: Vec::new(),
        })
    }

    fn cluster(&self, c: usize) -> Result<Arc<Cluster>, CellError> {
        self.clusters[c]
            .get_or_init(|| {
                experiment::load_cluster(&self.sweep.cluster_sources[c])
                    .map(|(_, cl)| Arc::new(cl))
                    .map_err(Arc::new)
            })
            .clone()
            .map_err(CellError::Cluster)
    }

    fn jobs(&self, t: usize, c: usize, cluster: &Cluster) -> Result<Arc<Vec<Job>>, CellError> {
        let spec = &self.sweep.traces[t];
        let format = match &spec.format {
            None => None,
            Some(f) => Some(Format::parse(f).ok_or_else(|| CellError::Format(f.clone()))?),
        };
        self.traces[t * self.sweep.clusters.len() + c]
            .get_or_init(|| {
                let opts = ReadOptions {
                    format,
                    threads: Some(1),
                    ..ReadOptions::default()
                };
                let opts = experiment::read_options_for(&opts, cluster);
                apiary_trace::read(&spec.path, &opts)
                    .map(|tr| Arc::new(tr.jobs))
                    .map_err(Arc::new)
            })
            .clone()
            .map_err(CellError::Trace)
    }

    /// Runs `cell` and returns its summary, and each VC's when the sweep asks for them.
    pub fn run(&self, cell: &Cell) -> Result<CellOutcome, CellError> {
        let s = self.sweep;
        if let Some(mode) = s.sharing {
            return self.run_sharing(cell, mode);
        }
        if let Some(l) = &s.llm {
            return self.run_llm(cell, l);
        }
        let cluster = self.cluster(cell.cluster)?;
        let all = self.jobs(cell.trace, cell.cluster, &cluster)?;
        let mut jobs = match s.traces[cell.trace].sample {
            Some(n) => sample(&all, n, cell.seed),
            None => all.as_ref().clone(),
        };
        compress(&mut jobs, cell.load);
        let setting = &s.settings[cell.setting];
        let mut params = Params::from_pairs(setting.params.iter().map(String::as_str))?;
        let mut cfg = s.config.clone();
        experiment::resource_params(&mut params, &mut cfg)?;
        let mut policy = registry::build(&setting.policy, &params)?;
        let choice = SpeedChoice {
            model: s.speed.clone(),
            data: s.speed_data.clone(),
            unknown: 1.0,
        };
        let (speed, _) =
            experiment::throughput(&choice, Some(&s.traces[cell.trace].path), &cluster)?;
        experiment::complete_jobs(policy.as_ref(), &choice, &mut jobs, cell.seed);
        cfg.seed = cell.seed;
        let mut out = apiary_sim::run(
            cluster.as_ref().clone(),
            jobs,
            policy.as_mut(),
            speed.as_ref(),
            &cfg,
            &mut |_| {},
        )?;
        out.params = setting.params.clone();
        let vcs = if s.per_vc.is_empty() {
            Vec::new()
        } else {
            apiary_report::vc::vc_summaries(&out, s.percentile)
        };
        Ok(CellOutcome {
            measured: Measured::Training(Box::new(Summary::of(&out, s.percentile))),
            vcs,
        })
    }
}

/// What one cell measured.
#[derive(Clone, Debug)]
pub struct CellOutcome {
    /// What the run measured.
    pub measured: Measured,
    /// Each VC's summary (VCs in name order), when the sweep has `per_vc` metrics and
    /// the trace has VCs.
    pub vcs: Vec<(String, Summary)>,
}

/// What a cell's run measured: a training run's summary, or a GPU-sharing run's
/// figures.
#[derive(Clone, Debug)]
pub enum Measured {
    /// A training policy's run.
    Training(Box<Summary>),
    /// A GPU-sharing policy's run.
    Sharing(apiary_share::Figures),
    /// An LLM-serving policy's run.
    Llm(Box<apiary_llm::LlmSummary>),
}

/// A run's value of a sweep metric, by name.
pub trait Metric {
    /// The value called `name`, if the run has one.
    fn metric(&self, name: &str) -> Option<f64>;
}

impl Metric for Summary {
    fn metric(&self, name: &str) -> Option<f64> {
        Summary::metric(self, name)
    }
}

impl Metric for Measured {
    fn metric(&self, name: &str) -> Option<f64> {
        match self {
            Measured::Training(s) => s.metric(name),
            Measured::Sharing(f) => f.metric(name),
            Measured::Llm(l) => l.metric(name),
        }
    }
}

/// `n` jobs of `jobs` drawn without replacement by `seed`, in trace order (all of them
/// when `n` is at least their number).
pub fn sample(jobs: &[Job], n: usize, seed: u64) -> Vec<Job> {
    if n >= jobs.len() {
        return jobs.to_vec();
    }
    let mut idx: Vec<usize> = (0..jobs.len()).collect();
    Rng::stream(seed, "sweep-sample").shuffle(&mut idx);
    idx.truncate(n);
    idx.sort_unstable();
    idx.into_iter().map(|i| jobs[i].clone()).collect()
}

/// Divides the time since the first submission by `load` (arrivals come `load` times
/// as fast, as the Tiresias and Gavel papers vary load); deadlines keep their distance
/// from submission.
pub fn compress(jobs: &mut [Job], load: f64) {
    if load == 1.0 {
        return;
    }
    let Some(first) = jobs.iter().map(|j| j.submit).min() else {
        return;
    };
    for j in jobs {
        let submit = first + ((j.submit - first) as f64 / load).round() as u64;
        if let Some(d) = &mut j.deadline {
            *d = submit + d.saturating_sub(j.submit);
        }
        j.submit = submit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(submit: u64) -> Job {
        let mut j = Job::new(format!("j{submit}").as_str(), submit, 1, 1000);
        j.deadline = Some(submit + 500);
        j
    }

    #[test]
    fn compression_keeps_the_first_arrival_and_relative_deadlines() {
        let mut jobs = vec![job(100), job(300), job(1100)];
        compress(&mut jobs, 2.0);
        let subs: Vec<u64> = jobs.iter().map(|j| j.submit).collect();
        assert_eq!(subs, [100, 200, 600]);
        assert!(jobs.iter().all(|j| j.deadline == Some(j.submit + 500)));
    }

    #[test]
    fn samples_differ_by_seed_and_keep_trace_order() {
        let jobs: Vec<Job> = (0..100).map(|i| job(i * 10)).collect();
        let a = sample(&jobs, 10, 1);
        let b = sample(&jobs, 10, 2);
        assert_eq!(a.len(), 10);
        assert_ne!(a, b);
        assert!(a.windows(2).all(|w| w[0].submit < w[1].submit));
        assert_eq!(a, sample(&jobs, 10, 1));
        assert_eq!(sample(&jobs, 500, 1).len(), 100);
    }
}
