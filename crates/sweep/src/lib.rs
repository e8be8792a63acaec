//! Sweeps: a researcher's table of policies over traces, clusters, loads and
//! parameters, each repeated over seeds, with confidence intervals; for training, GPU
//! sharing and LLM serving ([`llm`]: instances and request rates as the axes).
//!
//! A sweep file ([`spec`]) names the axes; [`plan`] expands them into cells with fixed
//! ids, each one deterministic run; [`cell`] runs one; [`results`] keeps one result
//! file per cell (so a sweep resumes, and shards run anywhere) and merges them into
//! `results.csv` in cell order, byte-identical whoever ran them in whatever order;
//! [`aggregate`] turns the rows into means with intervals and ratios against a
//! baseline. [`shard`] plans a sweep into a folder whose shards any process can run,
//! and [`launch`] writes the Slurm job array and Kubernetes Indexed Job that run them;
//! threads and progress belong to the front end.

pub mod aggregate;
pub mod cell;
pub mod launch;
pub mod llm;
pub mod plan;
pub mod results;
pub mod shard;
pub mod spec;

pub use plan::{Cell, plan};
pub use spec::{Sweep, SweepError};
