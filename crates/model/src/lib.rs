//! The vocabulary every other apiary crate speaks: time, jobs, cluster topology and
//! the live allocation state of GPUs.
//!
//! It exists as its own crate so that the simulator, the live service and the report
//! writers agree on one definition of a job and of a cluster, and so that policies can
//! be written against plain data with no I/O, no clock and no async runtime. Nothing in
//! here reads files or the wall clock; parsers take strings, and time is a plain integer
//! (milliseconds) that the driver advances.

pub mod adaptive;
pub mod cluster;
pub mod cpu;
pub mod energy;
pub mod failures;
pub mod interleave;
pub mod io;
pub mod job;
pub mod nodeset;
pub mod online;
pub mod outcome;
pub mod power;
pub mod profiles;
pub mod scaling;
pub mod share;
pub mod speed;
pub mod state;

/// Time and seeded streams are [`apiary_core`]'s; every domain shares them.
pub use apiary_core::{rng, time};

pub use cluster::{Cluster, ClusterSpec, ClusterSpecError, Node, NodeGroup, Switch, SwitchSpec};
/// Short text kept inline (up to 24 bytes) rather than on the heap: every job carries
/// an id and usually a VC name, and allocating both was a sixth of reading a trace.
pub use compact_str::{CompactString, ToCompactString, format_compact};
pub use job::{Job, JobExtras, StageTimes};
pub use outcome::{JobOutcome, Occupancy, RunOutcome, UtilSeries};
pub use rng::{Chance, PyRandom, Rng};
pub use scaling::Scaling;
pub use speed::SpreadTable;
pub use state::{ClusterState, Placement, StateError};
pub use time::{HOUR, MINUTE, SECOND, Time, fmt_age, fmt_duration, rfc3339_utc};
