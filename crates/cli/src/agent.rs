//! `apiary agent`'s flags, and what the front end checks before the agent runs: the
//! token file, the jobs' user, and root.

use anyhow::Result;
use apiary_agent::{AgentOptions, agent, procs};
use std::path::PathBuf;

/// `apiary agent`'s flags.
#[derive(clap::Args, Debug)]
pub(crate) struct AgentArgs {
    /// Server URL.
    #[arg(long, env = "APIARY_SERVER", default_value = "http://127.0.0.1:8800")]
    pub server: String,
    /// File holding the agent token, mode 600 (or APIARY_TOKEN_FILE); `/dev/fd/N`
    /// reads an inherited descriptor. Never on the command line, where every
    /// process of the machine can read it.
    #[arg(long, env = "APIARY_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// This node's name in the server config (default: the host name).
    #[arg(long)]
    pub node: Option<String>,
    /// GPUs to declare (default: nvidia-smi's count).
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Directory for job output files (<job>-<attempt>.out).
    #[arg(long, default_value = "apiary-logs")]
    pub logs: PathBuf,
    /// Directory of the agent's durable records (default: LOGS/.agent).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Run jobs as this user: a name, a uid, or UID:GID (the agent must be root).
    #[arg(long)]
    pub run_as: Option<String>,
    /// Let jobs run as root when the agent is root and neither their VC (`run_as` in
    /// the server's [[vcs]]) nor --run-as names an account.
    #[arg(long)]
    pub allow_root_jobs: bool,
    /// Pass this variable of the agent's environment on to jobs (repeatable); jobs
    /// get no other variable of the agent's.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Take the node over from the agent serving it now: the server fences that
    /// agent, which kills its jobs and stops. Without it, an agent for a node whose
    /// agent is alive is refused.
    #[arg(long)]
    pub replace: bool,
    /// The `nvidia-smi` to run: it counts the GPUs when --gpus is not given, and sets
    /// their power limits for a policy that caps them (greenflow with power_limits;
    /// that needs root).
    #[arg(long, value_name = "PATH", default_value = "nvidia-smi")]
    pub nvidia_smi: PathBuf,
}

/// `apiary agent`: reads the token file, resolves the jobs' user, refuses root jobs
/// unless allowed, and runs the agent.
pub(crate) fn run_agent(a: AgentArgs) -> Result<()> {
    let AgentArgs {
        server,
        token_file,
        node,
        gpus,
        logs,
        state,
        run_as,
        allow_root_jobs,
        pass_env,
        replace,
        nvidia_smi,
    } = a;
    let node = node
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    let token = token_file.as_deref().map(procs::read_token).transpose()?;
    let run_as = match run_as {
        Some(u) => {
            let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
            Some(procs::resolve_user(&u, &passwd)?)
        }
        None => None,
    };
    let root = rustix::process::getuid().is_root();
    if run_as.is_some() && !root {
        anyhow::bail!("--run-as needs the agent to run as root");
    }
    if root && run_as.as_ref().is_none_or(|u| u.uid == 0) && !allow_root_jobs {
        eprintln!(
            "apiary agent: note: running as root without --run-as: each job runs as its \
             VC's account (`run_as` in the server's [[vcs]]), and a job whose VC names none \
             is refused (--allow-root-jobs runs it as root)"
        );
    }
    let state = state.unwrap_or_else(|| logs.join(".agent"));
    Ok(agent(AgentOptions {
        server,
        token,
        node,
        gpus,
        logs,
        state,
        run_as,
        pass_env,
        replace,
        allow_root_jobs,
        nvidia_smi,
    })?)
}
