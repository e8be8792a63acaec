//! Why the agent, or one of its jobs' supervisors, cannot go on.

use std::path::PathBuf;

/// Why the agent cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A file or directory of the agent's.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What it was doing (`creating`, `reading`, ...).
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A record of an earlier attempt that does not read.
    #[error("{}: not an agent record: {source}", path.display())]
    Record {
        /// The record.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// A record that does not write.
    #[error("writing an agent record: {0}")]
    Encode(#[from] serde_json::Error),
    /// A flag's value.
    #[error("{flag}: {why}")]
    Flag {
        /// The flag and its value as given (`--run-as train`).
        flag: String,
        /// What is wrong.
        why: String,
    },
    /// No GPUs were declared and none were found.
    #[error("no GPUs found (nvidia-smi absent or failing): declare them with --gpus N")]
    NoGpus,
    /// The signal handling the agent and its supervisors need.
    #[error("{0}: cannot install the signal handlers")]
    Signals(&'static str),
    /// The agent's own binary, which supervises its jobs.
    #[error("finding the apiary binary for job-exec: {0}")]
    Exe(std::io::Error),
    /// A job's program did not start.
    #[error("starting {program}: {source}")]
    Start {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A supervisor lost track of its job's process.
    #[error("job-exec: waiting for the job: {0}")]
    Wait(std::io::Error),
    /// Another agent holds the state directory.
    #[error("state directory {} is in use by another agent (instance {holder}): one agent per state directory", dir.display())]
    StateInUse {
        /// The directory.
        dir: PathBuf,
        /// The instance holding it, as its lock file names it.
        holder: String,
    },
    /// The server gave this agent's node to another instance, or refused to let it
    /// take the node: the agent killed its jobs and stops.
    #[error("the server refuses this agent: {0}")]
    Fenced(String),
    /// A job may not run under the account it would get here.
    #[error("{0}")]
    Account(String),
    /// A supervisor was given no command.
    #[error("job-exec: no command")]
    NoCommand,
}

impl AgentError {
    /// An I/O error while `what`-ing `path`.
    pub fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> AgentError {
        let path = path.into();
        move |source| AgentError::Io { what, path, source }
    }
}
