//! ElasticFlow's synthetic trace generator (`ElasticFlow/trace_generator/
//! generate_trace.py`), with its seed semantics, for the Fig. 9–11 runs.
//!
//! The artifact draws from Python's `random.Random` (MT19937) in four streams seeded
//! `seed` (job type), `seed + 1` (inter-arrival), `seed + 2` (duration) and `seed + 3`
//! (GPU count); [`PyRandom`] reproduces Python's seeding, `random()`, `uniform()` and
//! `choice()` bit for bit, so the same seed gives the artifact's jobs. Deadlines and
//! best-effort flags come from Python's *unseeded* global generator in the artifact, so
//! no seed reproduces them; here they come from a fifth stream seeded `seed + 4`. When
//! `min_ddl == max_ddl` and no job is best-effort (the Fig. 10 setup) they do not
//! depend on the draw, and the whole trace is the artifact's.

use crate::elasticflow::{ScalingError, Tables};
use apiary_model::PyRandom;

/// The artifact's job templates (`job_table.py`), in its order: model and global batch.
pub const TEMPLATES: [(&str, u32); 14] = [
    ("resnet50", 64),
    ("resnet50", 128),
    ("resnet50", 256),
    ("vgg16", 64),
    ("vgg16", 128),
    ("vgg16", 256),
    ("inception3", 64),
    ("inception3", 128),
    ("gpt2", 128),
    ("gpt2", 256),
    ("bert", 128),
    ("bert", 64),
    ("deepspeech2", 64),
    ("deepspeech2", 32),
];

/// `generate_trace.py`'s arguments.
#[derive(Clone, Debug)]
pub struct EfGenOptions {
    /// `--num_jobs`.
    pub jobs: usize,
    /// `--lam`: mean inter-arrival time, seconds (0: every job at time 0).
    pub lam: f64,
    /// `--seed`.
    pub seed: u64,
    /// `--min_ddl` and `--max_ddl`: a deadline is arrival + U(min, max) × duration.
    pub min_ddl: f64,
    /// See `min_ddl`.
    pub max_ddl: f64,
    /// `--best_effort_percentage`: share of best-effort jobs, 0 to 1.
    pub best_effort: f64,
    /// `--max_scale_factor`: the most GPUs a job asks for.
    pub max_gpus: u32,
}

impl Default for EfGenOptions {
    fn default() -> Self {
        EfGenOptions {
            jobs: 100,
            lam: 0.0,
            seed: 0,
            min_ddl: 0.5,
            max_ddl: 1.5,
            best_effort: 0.0,
            max_gpus: 16,
        }
    }
}

/// One generated job, as the artifact writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct EfJob {
    /// Arrival, seconds.
    pub submit: f64,
    /// Iterations.
    pub iterations: f64,
    /// Model.
    pub model: &'static str,
    /// Deadline, seconds.
    pub ddl: f64,
    /// Global batch.
    pub batch: u32,
    /// GPUs asked for.
    pub gpus: u32,
    /// Duration at `gpus`, seconds.
    pub duration: f64,
    /// Best-effort (no deadline).
    pub best_effort: bool,
}

/// `generate_scale_factor`: ITP's GPU-count mix.
fn scale_factor(r: f64, max: u32) -> u32 {
    let g = if (0.83..=0.86).contains(&r) {
        2
    } else if (0.86..=0.89).contains(&r) {
        4
    } else if (0.89..=0.99).contains(&r) {
        8
    } else if r >= 0.99 {
        16
    } else {
        1
    };
    g.min(max)
}

/// Why a trace could not be generated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EfGenError {
    /// A template job's model and batch have no table.
    #[error(transparent)]
    Scaling(#[from] ScalingError),
    /// A job's table lacks its GPU count (the artifact's assertion).
    #[error("job {job}: {model} batch {batch} has no throughput at {gpus} GPUs")]
    Gpus {
        /// Its index.
        job: usize,
        /// Its model.
        model: &'static str,
        /// Its global batch.
        batch: u32,
        /// Its GPU count.
        gpus: u32,
    },
}

/// Generates the trace; `tables` supply the throughput that turns a duration into
/// iterations (the artifact's `--throughputs_dir`, A100 by default). Fails, as the
/// artifact's assertion does, when a job's table lacks its GPU count.
pub fn generate(o: &EfGenOptions, tables: &Tables) -> Result<Vec<EfJob>, EfGenError> {
    let mut job_rng = PyRandom::new(o.seed);
    let mut arrival_rng = PyRandom::new(o.seed + 1);
    let mut duration_rng = PyRandom::new(o.seed + 2);
    let mut scale_rng = PyRandom::new(o.seed + 3);
    let mut global = PyRandom::new(o.seed + 4);
    let mut out = Vec::with_capacity(o.jobs);
    let mut prev: Option<f64> = None;
    for i in 0..o.jobs {
        let gpus = scale_factor(scale_rng.uniform(0.0, 1.0), o.max_gpus);
        let (model, batch) = TEMPLATES[job_rng.below(TEMPLATES.len() as u64) as usize];
        let duration = if duration_rng.random() >= 0.80 {
            60.0 * 10f64.powf(duration_rng.uniform(2.5, 4.0))
        } else {
            60.0 * 10f64.powf(duration_rng.uniform(1.0, 2.5))
        };
        let tput = tables
            .scaling(model, batch)?
            .tput(gpus)
            .ok_or(EfGenError::Gpus {
                job: i,
                model,
                batch,
                gpus,
            })?;
        let submit = match prev {
            None => 0.0,
            Some(p) if o.lam > 0.0 => p + -(1.0 - arrival_rng.random()).ln() * o.lam,
            Some(p) => p,
        };
        prev = Some(submit);
        let ddl = submit + (global.uniform(o.min_ddl, o.max_ddl) * duration).trunc();
        let best_effort = global.uniform(0.0, 1.0) < o.best_effort;
        out.push(EfJob {
            submit,
            iterations: duration * tput,
            model,
            ddl,
            batch,
            gpus,
            duration,
            best_effort,
        });
    }
    Ok(out)
}

/// Writes the jobs in the artifact's CSV (`job_id,submit_time,iteration,model_name,ddl,
/// batch_size,num_gpu,duration,best_effort`), numbers truncated as its `%d` does.
pub fn write(jobs: &[EfJob], mut w: impl std::io::Write) -> std::io::Result<()> {
    writeln!(
        w,
        "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration,best_effort"
    )?;
    for (i, j) in jobs.iter().enumerate() {
        writeln!(
            w,
            "{i},{},{},{},{},{},{},{},{}",
            j.submit.trunc() as i64,
            j.iterations.trunc() as i64,
            j.model,
            j.ddl.trunc() as i64,
            j.batch,
            j.gpus,
            j.duration.trunc() as i64,
            u8::from(j.best_effort)
        )?;
    }
    Ok(())
}
