//! What the core's tests share: a two-node live config (nodes `a` and `b`, 4 GPUs each)
//! with short heartbeat timeouts, kept in memory.

#![allow(dead_code)]

use apiary_server::config::{ConfigError, ServerConfig};
use apiary_server::types::{AttemptRef, Exit, Heartbeat};

/// The config for `policy`, with `extra` lines at top level before the nodes.
pub fn two_nodes(policy: &str, extra: &str) -> Result<ServerConfig, ConfigError> {
    two_nodes_with(policy, extra, "")
}

/// [`two_nodes`], with `node` lines in each node's table.
pub fn two_nodes_with(policy: &str, extra: &str, node: &str) -> Result<ServerConfig, ConfigError> {
    ServerConfig::parse(
        &format!(
            r#"policy = "{policy}"
data_dir = ":memory:"
heartbeat_interval_s = 1
node_timeout_s = 5
grace_s = 2
{extra}
[[nodes]]
name = "a"
gpus = 4
{node}
[[nodes]]
name = "b"
gpus = 4
{node}
"#
        ),
        "server.toml",
    )
}

/// A heartbeat from `node` (4 GPUs) running `running` (job, attempt) with `exited`
/// (job, attempt, code) to report.
pub fn hb(node: &str, running: &[(u64, u32)], exited: &[(u64, u32, i32)]) -> Heartbeat {
    Heartbeat {
        node: node.into(),
        instance: "test".into(),
        succeeds: None,
        replace: false,
        gpus: 4,
        running: running
            .iter()
            .map(|&(job, attempt)| AttemptRef { job, attempt })
            .collect(),
        exited: exited
            .iter()
            .map(|&(job, attempt, code)| Exit {
                job,
                attempt,
                code,
                lost: false,
                output_tail: String::new(),
            })
            .collect(),
        shutting_down: false,
        output: Vec::new(),
        hints: Vec::new(),
        online: Vec::new(),
    }
}
