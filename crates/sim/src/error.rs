//! Why a run could not be carried out.

use apiary_model::Time;
use apiary_policy::{Capability, PolicyError};

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The jobs were not sorted by submission time.
    #[error("jobs must be sorted by submit time (job {id} at {submit} ms comes after {prev} ms)")]
    Unsorted {
        /// The offending job.
        id: String,
        /// Its submit time.
        submit: Time,
        /// The previous job's submit time.
        prev: Time,
    },
    /// A slot length of zero.
    #[error("slot length must be positive")]
    ZeroSlot,
    /// The policy cannot work on this cluster and trace, or broke its contract.
    #[error("policy {0}")]
    Policy(#[from] PolicyError),
    /// A throughput model could not price a placement the policy chose.
    #[error("job {job}: {source}")]
    Rate {
        /// The job.
        job: String,
        /// Why.
        source: crate::throughput::RateError,
    },
    /// A job lacks data the policy's spec declares it reads.
    #[error("policy {policy} reads {what} ({capability}), which job {job} lacks{hint}")]
    Missing {
        /// The policy.
        policy: &'static str,
        /// The capability.
        capability: Capability,
        /// What the job lacks.
        what: &'static str,
        /// The first job without it.
        job: String,
        /// Where such jobs come from.
        hint: &'static str,
    },
    /// A policy gave running jobs more of a resource than the cluster has.
    #[error(
        "policy {policy} gave running jobs {given:.4e} {unit} of {resource}; the cluster has {has:.4e}"
    )]
    OverAllocated {
        /// The policy.
        policy: &'static str,
        /// The resource.
        resource: &'static str,
        /// What it gave.
        given: f64,
        /// What there is.
        has: f64,
        /// Its unit.
        unit: &'static str,
    },
    /// The failure model cannot be used for this run.
    #[error("--failures: {0}")]
    Failures(String),
}
