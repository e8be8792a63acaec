//! A client of `apiary serve`, for the command-line clients and the node agent: the
//! JSON API with the server's error messages kept ([`Client`], [`connect`]), sbatch's
//! syntaxes for `--dependency` and `--array` ([`sbatch`]), submitting as sbatch does
//! (`--export`, arrays, `--wait`: [`submit`]) and a job's times and outcome as Slurm
//! users read them ([`jobtime`]), and what scancel-style targets and filters select
//! ([`cancel`]).
//!
//! It exists so that the binary stays a front end (flags in, text out) and so that other
//! front ends, the agent first, speak to the server the same way. It prints nothing.

pub mod cancel;
pub mod client;
pub mod elastic;
pub mod jobtime;
pub mod sbatch;
pub mod submit;

pub use client::{Client, ClientError, connect};
