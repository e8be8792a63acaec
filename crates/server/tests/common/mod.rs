//! What the core's tests share: a two-node live config (nodes `a` and `b`, 4 GPUs each)
//! with short heartbeat timeouts, kept in memory.

use apiary_server::config::{ConfigError, ServerConfig};

/// The config for `policy`, with `extra` lines at top level before the nodes.
pub fn two_nodes(policy: &str, extra: &str) -> Result<ServerConfig, ConfigError> {
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
[[nodes]]
name = "b"
gpus = 4
"#
        ),
        "server.toml",
    )
}
