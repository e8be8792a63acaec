//! The `apiary` command: simulate and compare scheduling policies on real GPU-cluster
//! traces, inspect and convert traces, show clusters and list policies.
//!
//! This is the only crate that uses `anyhow`, draws progress bars or touches the
//! terminal; everything it does is a thin layer over the library crates.

use anyhow::{Context, Result, bail};
use apiary_model::{Cluster, ClusterSpec, Job, RunOutcome, fmt_duration};
use apiary_policy::{Params, registry};
use apiary_report::{Percentile, Summary};
use apiary_sim::{Config, DurationModel, Mode, SpreadModel, Throughput};
use apiary_trace::speed;

mod agent;
mod bench;
mod comm;
mod hived;
mod live;
use apiary_trace::{Format, ReadOptions};
use clap::{Args, Parser, Subcommand};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

const SAMPLE_TRACE: &str = "testdata/traces/philly-sample.csv";
const SAMPLE_TRACE_BYTES: &[u8] = include_bytes!("../../../testdata/traces/philly-sample.csv");

#[derive(Parser)]
#[command(
    name = "apiary",
    version,
    about = "A GPU-cluster scheduler and deterministic trace-driven simulator for deep-learning workloads"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Replay a trace on a cluster under one policy (no arguments: a committed Philly sample).
    Simulate(SimArgs),
    /// Run several policies on one trace; print a side-by-side table and write an HTML report.
    Compare(CompareArgs),
    /// List the built-in policies and their parameters.
    Policies,
    /// Cluster descriptions.
    Cluster {
        #[command(subcommand)]
        cmd: ClusterCmd,
    },
    /// Measure the simulator: the README's performance figures, each in a child process.
    Bench {
        /// Traces directory (default: ../shared/traces beside the checkout or the working
        /// directory).
        #[arg(long)]
        traces: Option<PathBuf>,
        /// Also run the 1,000,000-job synthetic cases (generates the trace once).
        #[arg(long)]
        full: bool,
        /// Where the synthetic trace is kept.
        #[arg(long, default_value = "target/bench")]
        work: PathBuf,
        /// Print the figures as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the live scheduler (HTTP API, durable state) from a TOML config.
    Serve {
        /// Server config (nodes, policy, data directory, listen address).
        #[arg(long, short)]
        config: PathBuf,
        /// Start with an empty state where the data directory's state is missing or
        /// empty (every job record is forgotten); never overwrites a state that is there.
        #[arg(long)]
        init: bool,
    },
    /// Run a node agent: heartbeats, runs assigned jobs, reports exits.
    Agent(AgentArgs),
    /// The supervisor of one job attempt, started by the agent (not for people).
    #[command(hide = true)]
    JobExec {
        /// Milliseconds between SIGTERM and SIGKILL when the agent is gone.
        #[arg(long)]
        grace_ms: u64,
        /// Program and arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Submit a job: `apiary submit --gpus 2 -- python train.py`.
    Submit {
        #[command(flatten)]
        job: live::Submission,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// List jobs (like squeue): queued and running, or all with --all.
    Jobs {
        /// Only this VC.
        #[arg(long)]
        vc: Option<String>,
        /// Only this state (queued, running, succeeded, failed, cancelled).
        #[arg(long)]
        state: Option<String>,
        /// Include finished jobs.
        #[arg(long, short)]
        all: bool,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// One job with its history.
    Job {
        /// Job id.
        id: u64,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// The end of a job's output (once its processes exited).
    Logs {
        /// Job id.
        id: u64,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// Cancel a job.
    Cancel {
        /// Job id.
        id: u64,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// List nodes (like sinfo).
    Nodes {
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// Stop placing new jobs on a node.
    Cordon {
        /// Node name.
        node: String,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// List the virtual clusters with their quota or cells and their jobs.
    Vcs {
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// Create a VC or set its GPU quota (admin).
    Quota {
        /// VC name.
        vc: String,
        /// GPUs it may hold at once.
        gpus: u64,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// Cordon a node and send its running jobs back to the queue.
    Drain {
        /// Node name.
        node: String,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// Place jobs on a node again.
    Uncordon {
        /// Node name.
        node: String,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// HiveD: replay algorithm calls, print cell status.
    Hived {
        #[command(subcommand)]
        cmd: HivedCmd,
    },
    /// Collective communication: the topology-optimal allgather / reduce-scatter /
    /// allreduce (ForestColl) and closed-form schedules.
    Comm {
        #[command(subcommand)]
        cmd: comm::CommCmd,
    },
    /// Inspect, convert and generate traces.
    Trace {
        #[command(subcommand)]
        cmd: TraceCmd,
    },
}

#[derive(Subcommand)]
enum HivedCmd {
    /// Replay a scenario of HiveD calls (config, pods, steps; YAML or JSON); one JSON line
    /// per step.
    Replay {
        /// Scenario file.
        scenario: PathBuf,
        /// Add the affinity groups and cluster status (HiveD's inspect shapes) to every line.
        #[arg(long)]
        inspect_each_step: bool,
    },
    /// Print physical and virtual cell status for a HiveD config (all nodes healthy).
    /// Time HiveD's scheduling decision on a large shared cluster.
    Bench {
        /// Cluster GPUs (8 per node).
        #[arg(long, default_value_t = 10_000)]
        gpus: u32,
        /// VCs (equal shares of the nodes).
        #[arg(long, default_value_t = 50)]
        vcs: usize,
        /// Decisions to time (after a quarter as many to warm up).
        #[arg(long, default_value_t = 20_000)]
        decisions: usize,
        /// GPU utilisation to hold (oldest jobs leave above it).
        #[arg(long, default_value_t = 0.8)]
        util: f64,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print the figures as JSON.
        #[arg(long)]
        json: bool,
    },
    Status {
        /// HiveD config (YAML or JSON).
        config: PathBuf,
        /// HiveD's inspect JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only this VC.
        #[arg(long)]
        vc: Option<String>,
    },
}

#[derive(Subcommand)]
enum ClusterCmd {
    /// Print a cluster (a preset such as n8g8, philly, itp; a .toml spec; or a peer .csv spec).
    Show {
        /// Preset name or file.
        cluster: String,
        /// Print the TOML spec instead of the tree.
        #[arg(long)]
        toml: bool,
    },
}

#[derive(Subcommand)]
enum TraceCmd {
    /// Job count, time span, GPU-count histogram and GPU-hours.
    Info {
        /// Trace file.
        file: PathBuf,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Write a trace in apiary's canonical CSV (or JSON lines).
    Convert {
        /// Trace file.
        file: PathBuf,
        /// Output file (`-` for stdout).
        #[arg(long, short)]
        out: PathBuf,
        /// Write JSON lines instead of CSV.
        #[arg(long)]
        jsonl: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Generate a trace as ElasticFlow's `generate_trace.py` does (same seed, same jobs).
    ///
    /// Fig. 10: `--jobs 100 --lam 1500 --min-ddl 1.5 --max-ddl 1.5 --seed 1`; Fig. 9:
    /// `--jobs 1000 --lam 1500`; Fig. 11: `--jobs 200 --lam 900 --best-effort 0.1..0.9`.
    Elasticflow {
        /// Number of jobs (`--num_jobs`).
        #[arg(long, default_value_t = 100)]
        jobs: usize,
        /// Mean inter-arrival time, seconds (`--lam`; 0 puts every job at time 0).
        #[arg(long, default_value_t = 0.0)]
        lam: f64,
        /// Seed (`--seed`).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Deadline = arrival + U(min, max) x duration (`--min_ddl`).
        #[arg(long, default_value_t = 0.5)]
        min_ddl: f64,
        /// See --min-ddl (`--max_ddl`).
        #[arg(long, default_value_t = 1.5)]
        max_ddl: f64,
        /// Share of best-effort jobs, 0 to 1 (`--best_effort_percentage`).
        #[arg(long, default_value_t = 0.0)]
        best_effort: f64,
        /// Most GPUs a job asks for (`--max_scale_factor`).
        #[arg(long, default_value_t = 16)]
        max_gpus: u32,
        /// Throughput tables that turn durations into iterations: A100 or T4.
        #[arg(long, default_value = "A100")]
        gpu: String,
        /// Output file (`-` for stdout).
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Generate a Philly-calibrated synthetic trace.
    Synth {
        /// Number of jobs.
        #[arg(long, default_value_t = 10_000)]
        jobs: usize,
        /// GPUs of the target cluster (sets the arrival rate).
        #[arg(long, default_value_t = 2816)]
        gpus: u32,
        /// Offered load (GPU-time demanded ÷ capacity); Philly's own is 0.133.
        #[arg(long, default_value_t = apiary_trace::synth::PHILLY_LOAD)]
        load: f64,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output file (`-` for stdout).
        #[arg(long, short)]
        out: PathBuf,
    },
}

#[derive(Args, Clone)]
struct ReadArgs {
    /// Trace format (detected from the header when omitted).
    #[arg(long)]
    format: Option<String>,
    /// Skip malformed rows (and report how many) instead of failing.
    #[arg(long)]
    skip_bad_rows: bool,
    /// Gavel throughput table for Gavel traces.
    #[arg(long)]
    gavel_throughputs: Option<PathBuf>,
    /// Muri's iteration-time scale on load (its simulator uses 1.015).
    #[arg(long)]
    muri_itertime_factor: Option<f64>,
    /// GPU type of ElasticFlow's throughput tables for ElasticFlow traces: A100 or T4
    /// (default: T4 on a T4 cluster, else A100).
    #[arg(long, value_name = "GPU")]
    elasticflow_gpu: Option<String>,
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Trace file (default: the committed Philly sample).
    #[arg(long, short)]
    trace: Option<PathBuf>,
    /// Cluster: preset (nNgG, philly, itp), .toml or peer .csv spec.
    #[arg(long, short, default_value = "n64g8")]
    cluster: String,
    /// Policy parameter, `key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Scheduling mode: `event` or `slot:SECONDS`.
    #[arg(long, default_value = "event")]
    mode: String,
    /// Seconds a job loses when it resumes after a preemption.
    #[arg(long, default_value_t = 0.0)]
    restart_overhead: f64,
    /// Artifact quirk: charge every running job its model's restart overhead at every
    /// event (Muri's simulator and its baselines).
    #[arg(long)]
    per_event_overhead: bool,
    /// Job speed model: `trace` (every placement runs at trace speed, as the
    /// Tiresias-family simulators), `gavel[:k80|p100|v100]` (Gavel's unconsolidated ÷
    /// consolidated throughput when a job spans nodes; GPU type v100 by default) or
    /// `pollux` (Pollux's measured step times by node count) or `comm` (compute plus
    /// the gradient allreduce at the optimal bandwidth of the placement's topology,
    /// docs/comm.md).
    #[arg(long, default_value = "trace")]
    speed: String,
    /// Data for --speed: Gavel's simulation_throughputs.json or the Pollux profile
    /// directory (found beside ../shared/traces when omitted).
    #[arg(long)]
    speed_data: Option<PathBuf>,
    /// Speed factor on a multi-node placement for models the --speed table lacks.
    #[arg(long, default_value_t = 1.0)]
    speed_unknown: f64,
    /// Driver: `sim` (the discrete-event engine) or `live` (the live service's state
    /// machine on simulated time, with simulated agents: docs/architecture.md).
    #[arg(long, default_value = "sim")]
    driver: String,
    /// Percentile definition: `nearest` (nearest rank) or `floor` (Muri's calc.py).
    #[arg(long, default_value = "nearest")]
    percentile: String,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Directory for jobs.csv, summary.json (and report.html for compare).
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// No progress bar or timing lines.
    #[arg(long, short)]
    quiet: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    read: ReadArgs,
}

#[derive(Args)]
struct SimArgs {
    /// Policy (see `apiary policies`).
    #[arg(long, short, default_value = "tiresias")]
    policy: String,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
struct CompareArgs {
    /// Comma-separated policies.
    #[arg(long, short, default_value = "fifo,sjf,srtf,srsf,tiresias")]
    policies: String,
    #[command(flatten)]
    run: RunArgs,
}

/// `apiary agent`'s flags.
#[derive(clap::Args, Debug)]
struct AgentArgs {
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
    /// Let jobs run as root when the agent is root and no --run-as is given.
    #[arg(long)]
    pub allow_root_jobs: bool,
    /// Pass this variable of the agent's environment on to jobs (repeatable); jobs
    /// get no other variable of the agent's.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
}

/// `apiary agent`: reads the token file, resolves the jobs' user, refuses root jobs
/// unless allowed, and runs the agent.
fn run_agent(a: AgentArgs) -> Result<()> {
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
    } = a;
    let node = node
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    let token = token_file
        .as_deref()
        .map(agent::procs::read_token)
        .transpose()?;
    let run_as = match run_as {
        Some(u) => {
            let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
            Some(agent::procs::resolve_user(&u, &passwd)?)
        }
        None => None,
    };
    let root = rustix::process::getuid().is_root();
    if run_as.is_some() && !root {
        anyhow::bail!("--run-as needs the agent to run as root");
    }
    if root && run_as.as_ref().is_none_or(|u| u.uid == 0) && !allow_root_jobs {
        anyhow::bail!(
            "the agent runs as root, so its jobs would too: give --run-as USER \
             (an unprivileged user), or --allow-root-jobs to run them as root anyway"
        );
    }
    let state = state.unwrap_or_else(|| logs.join(".agent"));
    agent::agent(agent::AgentOptions {
        server,
        token,
        node,
        gpus,
        logs,
        state,
        run_as,
        pass_env,
    })
}

fn main() {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Simulate(a) => simulate(a),
        Cmd::Compare(a) => compare(a),
        Cmd::Policies => {
            policies();
            Ok(())
        }
        Cmd::Cluster {
            cmd: ClusterCmd::Show { cluster, toml },
        } => load_cluster(&cluster).map(|(spec, c)| {
            if toml {
                print!("{}", spec.to_toml())
            } else {
                print!("{}", c.describe())
            }
        }),
        Cmd::Trace { cmd } => trace_cmd(cmd),
        Cmd::Comm { cmd } => match cmd {
            comm::CommCmd::Plan(a) => comm::plan(&a),
            comm::CommCmd::Compare(a) => comm::compare(&a),
            comm::CommCmd::Alltoall(a) => comm::alltoall(&a),
            comm::CommCmd::Presets => {
                comm::presets();
                Ok(())
            }
            comm::CommCmd::Export { topology } => comm::export(&topology),
            comm::CommCmd::Bench { json } => comm::bench(json),
        },
        Cmd::Hived { cmd } => match cmd {
            HivedCmd::Replay {
                scenario,
                inspect_each_step,
            } => hived::replay(&scenario, inspect_each_step),
            HivedCmd::Status { config, json, vc } => hived::status(&config, json, vc.as_deref()),
            HivedCmd::Bench {
                gpus,
                vcs,
                decisions,
                util,
                seed,
                json,
            } => hived::bench(gpus, vcs, decisions, util, seed, json),
        },
        Cmd::Serve { config, init } => live::serve(&config, init),
        Cmd::JobExec { grace_ms, command } => {
            match agent::procs::job_exec(std::time::Duration::from_millis(grace_ms), &command) {
                Ok(code) => std::process::exit(code),
                Err(e) => {
                    eprintln!("apiary job-exec: {e:#}");
                    std::process::exit(127);
                }
            }
        }
        Cmd::Agent(a) => run_agent(a),
        Cmd::Submit { job, client } => live::submit(&client, job),
        Cmd::Jobs {
            vc,
            state,
            all,
            client,
        } => live::jobs(&client, vc.as_deref(), state.as_deref(), all),
        Cmd::Job { id, client } => live::job(&client, id),
        Cmd::Cancel { id, client } => live::cancel(&client, id),
        Cmd::Logs { id, client } => live::logs(&client, id),
        Cmd::Nodes { client } => live::nodes(&client),
        Cmd::Cordon { node, client } => live::node_action(&client, &node, "cordon"),
        Cmd::Uncordon { node, client } => live::node_action(&client, &node, "uncordon"),
        Cmd::Drain { node, client } => live::node_action(&client, &node, "drain"),
        Cmd::Vcs { client } => live::vcs(&client),
        Cmd::Quota { vc, gpus, client } => live::quota(&client, &vc, gpus),
        Cmd::Bench {
            traces,
            full,
            work,
            json,
        } => {
            let dir = traces.or_else(|| {
                speed::find_peer_file(None, "philly/philly.csv")
                    .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
            });
            bench::bench(dir.as_deref(), full, &work, json)
        }
    };
    if let Err(e) = res {
        // Library errors often already print their cause; show each cause once.
        let mut msg = String::new();
        for cause in e.chain() {
            let c = cause.to_string();
            if !msg.contains(&c) {
                if !msg.is_empty() {
                    msg.push_str(": ");
                }
                msg.push_str(&c);
            }
        }
        eprintln!("error: {msg}");
        std::process::exit(1);
    }
}

fn policies() {
    for s in registry::BUILTIN {
        println!("{:<18} {}", s.name, s.about);
        let live = match s.capabilities.live_blocker() {
            Some((c, _)) => format!("simulator only (`{c}`)"),
            None => "simulator and live".into(),
        };
        println!("    capabilities: {}; {live}", s.capabilities);
        for p in s.params {
            println!(
                "    {:<16} {:<14} {}",
                p.key,
                format!("[{}]", p.default),
                p.about
            );
        }
    }
}

pub(crate) fn load_cluster(name: &str) -> Result<(ClusterSpec, Cluster)> {
    let p = Path::new(name);
    if p.is_file() {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {name}"))?;
        let spec = if name.ends_with(".csv") {
            ClusterSpec::from_peer_csv_str(&text, name)?
        } else {
            ClusterSpec::from_toml_str(&text, name)?
        };
        let c = spec.build_from(name)?;
        Ok((spec, c))
    } else {
        let spec = ClusterSpec::preset(name)?;
        let c = spec.build()?;
        Ok((spec, c))
    }
}

fn read_opts(a: &ReadArgs) -> Result<ReadOptions> {
    let format = match &a.format {
        None => None,
        Some(f) => Some(
            Format::parse(f)
                .with_context(|| format!("unknown --format '{f}' (one of: {})", Format::names()))?,
        ),
    };
    Ok(ReadOptions {
        format,
        skip_bad_rows: a.skip_bad_rows,
        gavel_throughputs: a.gavel_throughputs.clone(),
        gavel_worker: None,
        muri_itertime_factor: a.muri_itertime_factor,
        elasticflow_gpu: a.elasticflow_gpu.clone(),
    })
}

/// Reading options for a run on `cluster`: ElasticFlow traces on a T4 cluster take
/// the T4 tables unless told otherwise.
fn read_for(a: &ReadArgs, cluster: &Cluster) -> ReadArgs {
    let mut a = a.clone();
    if a.elasticflow_gpu.is_none()
        && cluster
            .nodes
            .first()
            .is_some_and(|n| n.gpu_type.eq_ignore_ascii_case("t4"))
    {
        a.elasticflow_gpu = Some("T4".into());
    }
    a
}

fn load_trace(path: Option<&Path>, a: &ReadArgs, quiet: bool) -> Result<(String, Vec<Job>)> {
    let (name, trace) = match path {
        Some(p) => (
            p.display().to_string(),
            apiary_trace::read(p, &read_opts(a)?)?,
        ),
        None => {
            // The committed sample, embedded so the default run works from any directory.
            let dir = std::env::temp_dir().join(format!("apiary-sample-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let f = dir.join("philly-sample.csv");
            std::fs::write(&f, SAMPLE_TRACE_BYTES)?;
            let t = apiary_trace::read(&f, &read_opts(a)?);
            let _ = std::fs::remove_dir_all(&dir);
            (
                format!(
                    "{SAMPLE_TRACE} (3,000 Philly jobs, CC-BY-4.0, see testdata/traces/README.md)"
                ),
                t?,
            )
        }
    };
    if trace.skipped > 0 {
        eprintln!(
            "warning: skipped {} malformed rows of {name}; first: {}",
            trace.skipped,
            trace.first_skip.as_deref().unwrap_or("")
        );
    }
    for (why, n) in &trace.excluded {
        if !quiet {
            eprintln!("note: {n} rows of {name} are not jobs here: {why}");
        }
    }
    Ok((name, trace.jobs))
}

fn config(a: &RunArgs) -> Result<Config> {
    let mode = match a.mode.as_str() {
        "event" => Mode::EventDriven,
        m => match m
            .strip_prefix("slot:")
            .and_then(|s| s.parse::<f64>().ok())
            .and_then(apiary_model::time::secs_f64)
        {
            Some(ms) if ms > 0 => Mode::Slotted(ms),
            _ => bail!(
                "--mode must be 'event' or 'slot:SECONDS' with 0.001 <= SECONDS <= 10^12 (got '{m}')"
            ),
        },
    };
    let Some(restart_overhead) = apiary_model::time::secs_f64(a.restart_overhead) else {
        bail!("--restart-overhead must be a number of seconds, 0 to 10^12");
    };
    Ok(Config {
        mode,
        restart_overhead,
        per_event_overhead: a.per_event_overhead,
        seed: a.seed,
    })
}

fn percentile(a: &RunArgs) -> Result<Percentile> {
    match a.percentile.as_str() {
        "nearest" => Ok(Percentile::NearestRank),
        "floor" => Ok(Percentile::Floor),
        p => bail!("--percentile must be 'nearest' or 'floor' (got '{p}')"),
    }
}

fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// The throughput model chosen by `--speed`.
fn speed_model(a: &RunArgs, cluster: &Cluster) -> Result<Box<dyn Throughput>> {
    if !(a.speed_unknown.is_finite() && a.speed_unknown > 0.0 && a.speed_unknown <= 1.0) {
        bail!("--speed-unknown must be in (0, 1]");
    }
    let (kind, arg) = a.speed.split_once(':').unwrap_or((a.speed.as_str(), ""));
    let start = a.trace.as_deref().and_then(Path::parent);
    let mut table = match kind {
        "trace" => return Ok(Box::new(DurationModel)),
        "comm" => {
            return Ok(Box::new(
                apiary_sim::CommModel::new(cluster).context("--speed comm")?,
            ));
        }
        "gavel" => {
            let worker = if arg.is_empty() { "v100" } else { arg };
            let path = a
                .speed_data
                .clone()
                .or_else(|| speed::find_peer_file(start, "peers/gavel/simulation_throughputs.json"))
                .context("--speed gavel needs Gavel's simulation_throughputs.json: pass --speed-data FILE")?;
            speed::gavel_spread(&path, worker)?
        }
        "pollux" => {
            let path = a
                .speed_data
                .clone()
                .or_else(|| speed::find_peer_file(start, "peers/pollux"))
                .context(
                    "--speed pollux needs Pollux's profile directory: pass --speed-data DIR",
                )?;
            speed::pollux_spread(&path)?
        }
        other => bail!("--speed must be trace, gavel[:GPU], pollux or comm (got '{other}')"),
    };
    table.unknown = a.speed_unknown;
    if !a.quiet {
        eprintln!("speed: {} ({} factors)", table.source, table.len());
    }
    Ok(Box::new(SpreadModel(table)))
}

fn run_one(
    policy: &str,
    a: &RunArgs,
    cluster: &Cluster,
    mut jobs: Vec<Job>,
    cfg: &Config,
) -> Result<RunOutcome> {
    let speed = speed_model(a, cluster)?;
    let params = Params::from_pairs(a.set.iter().map(String::as_str))?;
    let mut p = registry::build(policy, &params)?;
    let comm = a.speed == "comm";
    if comm {
        // The allreduce needs a gradient size: jobs without a model get one of Muri's,
        // drawn as Muri's profiles draw them (seeded by job id).
        let mut drawn = 0;
        for j in jobs.iter_mut().filter(|j| j.model.is_none()) {
            j.model = Some(apiary_model::profiles::draw(&j.id, cfg.seed).to_string());
            drawn += 1;
        }
        if drawn > 0 && !a.quiet {
            eprintln!(
                "--speed comm: {drawn} jobs without a model were given one drawn from Muri's \
                 profile table (seed {}; docs/comm.md)",
                cfg.seed
            );
        }
    }
    if registry::find(policy).is_some_and(|s| s.has(apiary_policy::Capability::Profiles)) {
        let drawn = apiary_model::profiles::assign(&mut jobs, cfg.seed);
        if drawn > 0 && !a.quiet {
            eprintln!(
                "{policy}: {drawn} jobs without stage times or a known model were given one \
                 drawn from Muri's profile table (seed {}; docs/policies/muri.md)",
                cfg.seed
            );
        }
    }
    let bar = if a.quiet || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(jobs.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix} [{bar:30}] {pos}/{len} jobs done, {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b.set_prefix(policy.to_string());
        b
    };
    let t0 = Instant::now();
    if !matches!(a.driver.as_str(), "sim" | "live") {
        bail!("--driver must be sim or live (got '{}')", a.driver);
    }
    let mut out = if a.driver == "live" {
        if a.speed != "trace" || cfg.restart_overhead != 0 || cfg.per_event_overhead {
            bail!(
                "--driver live runs jobs at trace speed with no restart overheads: drop \
                 --speed, --restart-overhead and --per-event-overhead"
            );
        }
        if cfg.mode != apiary_sim::Mode::EventDriven {
            bail!("--driver live is event-driven: drop --mode");
        }
        apiary_server::replay::run(cluster, jobs, policy, &params, cfg.seed)?
    } else {
        run_sim(cluster, jobs, cfg, p.as_mut(), speed.as_ref(), &bar, t0)?
    };
    bar.finish_and_clear();
    let wall = t0.elapsed().as_secs_f64();
    out.params = params.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !a.quiet {
        eprintln!(
            "{policy}: {} events in {:.3} s ({:.2} M events/s), {} policy passes, peak memory {}",
            out.events,
            wall,
            out.events as f64 / wall.max(1e-9) / 1e6,
            out.passes,
            peak_rss_mb().map_or("n/a".into(), |m| format!("{m:.0} MB"))
        );
    }
    Ok(out)
}

/// One run of the discrete-event engine, with a progress bar.
fn run_sim(
    cluster: &Cluster,
    jobs: Vec<Job>,
    cfg: &Config,
    p: &mut dyn apiary_policy::Policy,
    speed: &dyn apiary_sim::Throughput,
    bar: &indicatif::ProgressBar,
    t0: Instant,
) -> Result<RunOutcome> {
    Ok(apiary_sim::run(
        cluster.clone(),
        jobs,
        p,
        speed,
        cfg,
        &mut |pr| {
            bar.set_position(pr.finished as u64);
            let rate = pr.events as f64 / t0.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!("{:.2} M events/s", rate / 1e6));
        },
    )?)
}

fn write_outputs(dir: &Path, name: &str, sum: &Summary, o: &RunOutcome) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let f = |n: String| -> Result<std::io::BufWriter<std::fs::File>> {
        let p = dir.join(n);
        Ok(std::io::BufWriter::new(
            std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?,
        ))
    };
    apiary_report::write_jobs_csv(o, f(format!("{name}jobs.csv"))?)?;
    apiary_report::write_summary_json(sum, o, f(format!("{name}summary.json"))?)?;
    Ok(())
}

fn simulate(a: SimArgs) -> Result<()> {
    let r = &a.run;
    let (_, cluster) = load_cluster(&r.cluster)?;
    let (tname, jobs) = load_trace(r.trace.as_deref(), &read_for(&r.read, &cluster), r.quiet)?;
    let cfg = config(r)?;
    if !r.quiet && !r.json {
        println!(
            "trace {tname}: {} jobs; cluster {}: {} GPUs; policy {}",
            jobs.len(),
            cluster.name,
            cluster.total_gpus,
            a.policy
        );
    }
    let out = run_one(&a.policy, r, &cluster, jobs, &cfg)?;
    let sum = Summary::of(&out, percentile(r)?);
    if let Some(dir) = &r.out {
        write_outputs(dir, "", &sum, &out)?;
    }
    if r.json {
        println!("{}", serde_json::to_string_pretty(&sum)?);
    } else {
        print!("{}", apiary_report::table(std::slice::from_ref(&sum)));
    }
    Ok(())
}

fn compare(a: CompareArgs) -> Result<()> {
    let r = &a.run;
    let (_, cluster) = load_cluster(&r.cluster)?;
    let (tname, jobs) = load_trace(r.trace.as_deref(), &read_for(&r.read, &cluster), r.quiet)?;
    let cfg = config(r)?;
    let pct = percentile(r)?;
    let names: Vec<&str> = a
        .policies
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if names.is_empty() {
        bail!("--policies is empty");
    }
    for n in &names {
        if registry::find(n).is_none() {
            bail!("unknown policy '{n}' (see `apiary policies`)");
        }
    }
    if !r.quiet && !r.json {
        println!(
            "trace {tname}: {} jobs; cluster {}: {} GPUs",
            jobs.len(),
            cluster.name,
            cluster.total_gpus
        );
    }
    let mut runs = Vec::new();
    for n in &names {
        let out = run_one(n, r, &cluster, jobs.clone(), &cfg)?;
        let sum = Summary::of(&out, pct);
        runs.push((sum, out));
    }
    let sums: Vec<Summary> = runs.iter().map(|r| r.0.clone()).collect();
    let vcs = vc_rows(&runs)?;
    if let Some(dir) = &r.out {
        if !vcs.is_empty() {
            let p = dir.join("vcs.json");
            std::fs::create_dir_all(dir)?;
            let m: std::collections::BTreeMap<&str, &Vec<apiary_report::vc::VcRow>> =
                vcs.iter().map(|(n, v)| (n.as_str(), v)).collect();
            std::fs::write(&p, serde_json::to_string_pretty(&m)?)
                .with_context(|| format!("writing {}", p.display()))?;
        }
        for (s, o) in &runs {
            write_outputs(dir, &format!("{}-", s.policy), s, o)?;
        }
        let refs: Vec<(Summary, &RunOutcome)> = runs.iter().map(|(s, o)| (s.clone(), o)).collect();
        let html = apiary_report::html_report(
            &format!("apiary compare: {tname} on {}", cluster.name),
            &refs,
        );
        let p = dir.join("report.html");
        std::fs::write(&p, html).with_context(|| format!("writing {}", p.display()))?;
        if !r.quiet {
            eprintln!("wrote {}", p.display());
        }
    }
    if r.json {
        println!("{}", serde_json::to_string_pretty(&sums)?);
    } else {
        print!("{}", apiary_report::table(&sums));
        if !vcs.is_empty() {
            println!();
            if !runs.iter().any(|r| r.0.policy == "private") {
                println!("(add `private` to --policies to see the sharing anomaly)");
            }
            print!("{}", apiary_report::vc::vc_table(&vcs));
        }
    }
    Ok(())
}

/// Per-VC rows of the runs of VC-sharing policies, with the sharing anomaly against the
/// `private` run when there is one.
fn vc_rows(runs: &[(Summary, RunOutcome)]) -> Result<Vec<(String, Vec<apiary_report::vc::VcRow>)>> {
    let private = runs.iter().find(|r| r.0.policy == "private").map(|r| &r.1);
    let mut out = Vec::new();
    for (s, o) in runs {
        if !apiary_policy::vc::SHARING.contains(&s.policy.as_str()) {
            continue;
        }
        let base = private.filter(|_| s.policy != "private");
        out.push((s.policy.clone(), apiary_report::vc::vc_rows(o, base)?));
    }
    Ok(out)
}

fn open_out(p: &Path) -> Result<Box<dyn Write>> {
    if p == Path::new("-") {
        Ok(Box::new(std::io::BufWriter::new(std::io::stdout().lock())))
    } else {
        Ok(Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )))
    }
}

fn trace_cmd(cmd: TraceCmd) -> Result<()> {
    match cmd {
        TraceCmd::Info { file, read } => {
            let t = apiary_trace::read(&file, &read_opts(&read)?)?;
            let jobs = &t.jobs;
            println!("file      {}", file.display());
            println!("format    {}", t.format.name());
            println!("jobs      {}", jobs.len());
            if t.skipped > 0 {
                println!(
                    "skipped   {} malformed rows (first: {})",
                    t.skipped,
                    t.first_skip.as_deref().unwrap_or("")
                );
            }
            for (why, n) in &t.excluded {
                println!("excluded  {n} rows: {why}");
            }
            if let (Some(f), Some(l)) = (jobs.first(), jobs.last()) {
                println!(
                    "span      {} (first submit {:.3} s, last {:.3} s)",
                    fmt_duration(l.submit - f.submit),
                    f.submit as f64 / 1e3,
                    l.submit as f64 / 1e3
                );
            }
            let gpu_h: f64 = jobs.iter().map(|j| j.gpu_time() as f64).sum::<f64>() / 3.6e6;
            println!("GPU-hours {gpu_h:.1}");
            let mut hist = std::collections::BTreeMap::<u32, usize>::new();
            for j in jobs {
                *hist.entry(j.gpus).or_default() += 1;
            }
            println!("GPUs per job:");
            for (g, n) in hist {
                println!(
                    "  {g:>6}  {n:>8}  {:5.1}%",
                    100.0 * n as f64 / jobs.len().max(1) as f64
                );
            }
            let mut d: Vec<u64> = jobs.iter().map(|j| j.duration).collect();
            d.sort_unstable();
            if !d.is_empty() {
                let mean = d.iter().map(|x| *x as f64).sum::<f64>() / d.len() as f64;
                println!(
                    "duration  median {}  mean {}  max {}",
                    fmt_duration(d[d.len() / 2]),
                    fmt_duration(mean as u64),
                    fmt_duration(d[d.len() - 1])
                );
            }
            let vcs: std::collections::BTreeSet<&str> =
                jobs.iter().filter_map(|j| j.vc.as_deref()).collect();
            if !vcs.is_empty() {
                println!("VCs       {}", vcs.len());
            }
            Ok(())
        }
        TraceCmd::Convert {
            file,
            out,
            jsonl,
            read,
        } => {
            let t = apiary_trace::read(&file, &read_opts(&read)?)?;
            let w = open_out(&out)?;
            if jsonl {
                apiary_trace::write_jsonl(&t.jobs, w)?
            } else {
                apiary_trace::write_csv(&t.jobs, w)?
            }
            if out != Path::new("-") {
                eprintln!(
                    "wrote {} jobs ({} format) to {}",
                    t.jobs.len(),
                    t.format.name(),
                    out.display()
                );
            }
            Ok(())
        }
        TraceCmd::Elasticflow {
            jobs,
            lam,
            seed,
            min_ddl,
            max_ddl,
            best_effort,
            max_gpus,
            gpu,
            out,
        } => {
            if !(lam.is_finite() && lam >= 0.0) {
                bail!("--lam must be 0 or more seconds");
            }
            if !(min_ddl.is_finite() && max_ddl.is_finite() && 0.0 < min_ddl && min_ddl <= max_ddl)
            {
                bail!("--min-ddl and --max-ddl must satisfy 0 < min <= max");
            }
            if !(0.0..=1.0).contains(&best_effort) {
                bail!("--best-effort must be between 0 and 1");
            }
            if max_gpus == 0 {
                bail!("--max-gpus must be at least 1");
            }
            let tables = apiary_trace::elasticflow::Tables::builtin(&gpu).with_context(|| {
                format!(
                    "--gpu {gpu}: no such throughput tables (choose {})",
                    apiary_trace::elasticflow::GPU_TYPES.join(", ")
                )
            })?;
            let o = apiary_trace::efgen::EfGenOptions {
                jobs,
                lam,
                seed,
                min_ddl,
                max_ddl,
                best_effort,
                max_gpus,
            };
            let js = apiary_trace::efgen::generate(&o, &tables).map_err(anyhow::Error::msg)?;
            apiary_trace::efgen::write(&js, open_out(&out)?)?;
            Ok(())
        }
        TraceCmd::Synth {
            jobs,
            gpus,
            load,
            seed,
            out,
        } => {
            if !(load.is_finite() && load > 0.0) {
                bail!("--load must be positive");
            }
            let o = apiary_trace::synth::SynthOptions {
                jobs,
                cluster_gpus: gpus,
                load,
                seed,
                max_gpus: gpus,
            };
            let js = apiary_trace::synth::generate(&o);
            apiary_trace::write_csv(&js, open_out(&out)?)?;
            Ok(())
        }
    }
}
