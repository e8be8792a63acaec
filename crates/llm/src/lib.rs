//! Request-level simulation of LLM inference clusters.
//!
//! Training jobs hold GPUs for hours and the training simulator moves them whole; an
//! inference cluster serves thousands of short requests per minute, each a prompt to
//! prefill and tokens to decode, packed by every instance into iterations of
//! continuous batching with a paged KV cache. What decides tail latency there is how
//! requests are dispatched to instances, whether they move between instances (Llumnix's
//! live migration), and how the KV cache runs out (preemption). This crate simulates
//! that: [`replica`] is one vLLM-style instance, [`latency`] times its iterations from
//! Vidur's profiles and the roofline, [`policy`] holds the cluster schedulers behind
//! one trait, [`engine`] runs them over a [`workload`] on the shared event queue of
//! `apiary-sim`, and [`metrics`] reports TTFT, TPOT and the rest.
//!
//! Deterministic by construction, like the training simulator: time is integer
//! microseconds, events pop in `(time, seq)` order, generators draw from named seeded
//! streams, and no decision depends on hash order.

pub mod disagg;
pub mod engine;
pub mod hardware;
pub mod html;
pub mod latency;
pub mod metrics;
pub mod migration;
pub mod outputs;
pub mod placement;
pub mod policy;
pub mod pool;
pub mod prefix;
pub mod replica;
mod serving;
pub mod setup;
pub mod workload;

pub use engine::{Cluster, LlmOutcome, simulate};
pub use metrics::LlmSummary;
pub use workload::{Micros, Request, SEC};

/// What can go wrong building or running an LLM serving simulation.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A trace row is malformed.
    #[error("{path}: line {line}: field '{field}': {message}")]
    Trace {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// The column or key.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A name not in a built-in table.
    #[error("unknown {what} '{name}' (known: {known})")]
    Unknown {
        /// Model, GPU or policy.
        what: &'static str,
        /// The name given.
        name: String,
        /// The names known.
        known: String,
    },
    /// The model's weights leave no room for a KV cache.
    #[error(
        "{model} does not fit on {tp} x {gpu}: its weights take {weights_gb:.1} GB of the \
         {usable_gb:.1} GB the engine may use; raise --tp"
    )]
    DoesNotFit {
        /// Model.
        model: String,
        /// GPU.
        gpu: String,
        /// Tensor-parallel degree.
        tp: u32,
        /// Weight gigabytes.
        weights_gb: f64,
        /// Usable gigabytes over the instance's GPUs.
        usable_gb: f64,
    },
    /// A setting out of range.
    #[error("{what}: {message}")]
    Invalid {
        /// The setting.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A policy parameter.
    #[error(transparent)]
    Param(#[from] apiary_core::params::ParamError),
}
