//! What every apiary domain shares, and nothing else: integer time ([`time`]), the
//! `(time, seq)` event queue ([`queue`]), seeded random streams ([`rng`]), parameters
//! with their specs and parsers ([`params`]) and the registry of named, parameterised
//! things that front ends list and build by name ([`registry`]).
//!
//! It exists so that a domain (training clusters, LLM serving) can be built on the
//! same determinism and the same `--set key=value` conventions without depending on
//! another domain's crates: `apiary-llm` depends on this crate, not on the training
//! policies or the training simulator. It has no I/O, no clock and no async runtime.
//!
//! Error conventions, shared by every apiary library: each seam returns a typed error
//! (thiserror) that names what is wrong (the file, line and field; the parameter and
//! its value; the policy and the capability); only the binary uses `anyhow`.

pub mod params;
pub mod queue;
pub mod registry;
pub mod rng;
pub mod time;

pub use params::{ParamError, ParamSpec, Params};
pub use queue::EventQueue;
pub use registry::{Decl, Registry, Spec};
pub use rng::{Chance, PyRandom, Rng};
pub use time::{HOUR, MINUTE, SECOND, Time};
