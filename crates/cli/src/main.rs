//! The `apiary` command: simulate and compare scheduling policies on real GPU-cluster
//! traces, inspect and convert traces, show clusters and list policies.
//!
//! This is the only crate that uses `anyhow`, draws progress bars or touches the
//! terminal; everything it does is a thin layer over the library crates.

mod agent;
mod bench;
mod checkpoint;
mod comm;
mod figures;
mod hived;
mod live;
mod llm;
mod llm_input;
mod llm_iter;
mod llm_out;
mod llm_place;
mod llm_pool;
mod llm_seeds;
mod run;
mod seeds;
mod settings;
mod share;
mod sweep;
mod traces;

use agent::{AgentArgs, run_agent};
use apiary_policy::registry;
use apiary_trace::speed;
use clap::{Parser, Subcommand};
use run::{CompareArgs, SimArgs, compare, simulate};
use std::path::{Path, PathBuf};
use traces::{TraceCmd, trace_cmd};

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
    /// Sweeps: policy x trace x cluster x load x parameter grids over seeds, on every
    /// core, with 95 % intervals (docs/sweep.md).
    Sweep {
        #[command(subcommand)]
        cmd: sweep::SweepCmd,
    },
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
        /// Also measure with the state on this etcd (a client URL; a build with
        /// --features etcd): durable submissions, the state rebuilt at start, and
        /// fail-over between two servers. What they write stays there, under prefixes
        /// `apiary-bench/`, `apiary-rebuild/` and `apiary-failover/` (`etcdctl del
        /// --prefix apiary-` removes it).
        #[arg(long, value_name = "URL")]
        etcd: Option<String>,
        /// Fail (exit 1) when a figure is more than 20 % worse than the median of the
        /// last five runs on this machine (the history in --work).
        #[arg(long)]
        check: bool,
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
        /// Serve as a Kubernetes scheduler extender (HiveD's filter, prioritize, preempt
        /// and bind, and its inspect API) behind a stock kube-scheduler; the config is
        /// then an extender config (docs/serve.md, "Kubernetes scheduler extender").
        #[arg(long, conflicts_with = "init")]
        extender: bool,
    },
    /// Run a node agent: heartbeats, runs assigned jobs, reports exits.
    Agent(AgentArgs),
    /// The supervisor of one job attempt, started by the agent (not for people).
    #[command(hide = true)]
    JobExec {
        /// Milliseconds between SIGTERM and SIGKILL when the agent is gone.
        #[arg(long)]
        grace_ms: u64,
        /// Milliseconds of lease at start; renewals (`L <ms>` lines) come on stdin.
        #[arg(long)]
        lease_ms: Option<u64>,
        /// CPUs to pin the attempt to (`0,2-3`), for its input pipeline.
        #[arg(long)]
        cpus: Option<String>,
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
        /// With -a, also the archived jobs that ended since WHEN, as sacct's
        /// --starttime: now-3days, now-6hours, 2026-11-20, 2026-11-20T10:00 (local
        /// time) or unix seconds.
        #[arg(long, value_name = "WHEN", requires = "all")]
        since: Option<String>,
        /// Only this user's jobs.
        #[arg(long)]
        user: Option<String>,
        /// Print the list again every SECONDS (default 2) until interrupted.
        #[arg(long, short, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
        watch: Option<f64>,
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
    /// A job's output: what the server holds of a running job (its last 64 KiB per
    /// node), the end of a finished one's; -f follows it as the job runs.
    Logs {
        /// Job id.
        id: u64,
        /// Follow the output until the job ends (tail -f).
        #[arg(long, short)]
        follow: bool,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// Cancel a job.
    Cancel {
        /// Jobs, as scancel takes them: ids (an array's id cancels all its tasks), array
        /// tasks (12_3, 12_[3-5], 12_[1,4]).
        ids: Vec<String>,
        /// Only jobs of this name (an array's tasks match its name).
        #[arg(long)]
        name: Option<String>,
        /// Only jobs in this state (queued or running).
        #[arg(long)]
        state: Option<String>,
        /// Only this user's jobs.
        #[arg(long)]
        user: Option<String>,
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
        client: live::Connection,
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
        client: live::Connection,
    },
    /// Place jobs on a node again.
    Uncordon {
        /// Node name.
        node: String,
        #[command(flatten)]
        client: live::Connection,
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
    /// Checkpoint planning under failures: each level's interval, the expected waste
    /// and the effective training time ratio of a job.
    Checkpoint {
        #[command(subcommand)]
        cmd: checkpoint::CheckpointCmd,
    },
    /// LLM inference clusters: simulate and compare request schedulers (Llumnix,
    /// INFaaS++, round-robin) over vLLM-style instances, and pools shared by several
    /// services (SeaLLM).
    Llm {
        #[command(subcommand)]
        cmd: llm::LlmCmd,
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
    /// Time HiveD's scheduling decision on a large shared cluster (8-GPU nodes, equal
    /// VCs, held near a utilisation by Philly-sized jobs).
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
    /// Print physical and virtual cell status for a HiveD config (all nodes healthy).
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

/// Exit status of a run whose reader went away (`apiary ... | head`): the status a C
/// tool killed by SIGPIPE reports.
const CLOSED_PIPE: i32 = 141;

/// A closed stdout ends the run quietly with [`CLOSED_PIPE`], as it ends `cat` or
/// `grep`, instead of a panic (`println!` panics when a write fails) or an error line.
/// Only the main thread's printing: the service's worker threads log on as before.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied());
        let closed = message.is_some_and(|m| {
            m.starts_with("failed printing to stdout") && m.contains("Broken pipe")
        });
        if closed && std::thread::current().name() == Some("main") {
            std::process::exit(CLOSED_PIPE);
        }
        default(info);
    }));
}

/// Whether `e` is a write to a closed pipe.
fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() {
    quiet_on_closed_pipe();
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
        } => apiary_sim::experiment::load_cluster(&cluster)
            .map_err(anyhow::Error::from)
            .map(|(spec, c)| {
                if toml {
                    print!("{}", spec.to_toml())
                } else {
                    print!("{}", c.describe())
                }
            }),
        Cmd::Trace { cmd } => trace_cmd(cmd),
        Cmd::Llm { cmd } => llm::run(cmd),
        Cmd::Sweep { cmd } => sweep::run(cmd),
        Cmd::Checkpoint { cmd } => match cmd {
            checkpoint::CheckpointCmd::Plan(a) => checkpoint::plan(&a),
        },
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
        Cmd::Serve {
            config,
            init,
            extender,
        } => {
            if extender {
                live::serve_extender(&config)
            } else {
                live::serve(&config, init)
            }
        }
        Cmd::JobExec {
            grace_ms,
            lease_ms,
            cpus,
            command,
        } => {
            if let Some(c) = cpus {
                let pinned = apiary_agent::cpus::parse_list(&c)
                    .map_err(std::io::Error::other)
                    .and_then(|list| apiary_agent::cpus::pin_self(&list));
                if let Err(e) = pinned {
                    eprintln!("apiary job-exec: pinning to CPUs {c}: {e}");
                    std::process::exit(127);
                }
            }
            match apiary_agent::supervisor::job_exec(
                std::time::Duration::from_millis(grace_ms),
                lease_ms.map(std::time::Duration::from_millis),
                &command,
            ) {
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
            since,
            user,
            watch,
            client,
        } => live::jobs(
            &client,
            &live::Listing {
                vc,
                state,
                all,
                since,
                user,
            },
            watch,
        ),
        Cmd::Job { id, client } => live::job(&client, id),
        Cmd::Cancel {
            ids,
            name,
            state,
            user,
            client,
        } => live::cancel(&client, &ids, name, state.as_deref(), user),
        Cmd::Logs { id, follow, client } => live::logs(&client, id, follow),
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
            etcd,
            check,
        } => {
            let dir = traces.or_else(|| {
                speed::find_peer_file(None, "philly/philly.csv")
                    .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
            });
            bench::bench(dir.as_deref(), full, &work, json, etcd.as_deref(), check)
        }
    };
    if let Err(e) = res {
        if is_closed_pipe(&e) {
            std::process::exit(CLOSED_PIPE);
        }
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
    for s in registry::ALL {
        println!("{:<18} {}", s.name, s.about);
        // What an instance with the defaults uses, and what some parameters add (the
        // plugin bridge needs a command to build: with it, the core contract).
        let default = (s.build)(&Default::default())
            .map_or(apiary_policy::Capabilities::CORE, |p| p.capabilities());
        let more = s.capabilities.minus(default);
        let by_params = if more == apiary_policy::Capabilities::CORE {
            String::new()
        } else {
            format!(" ({more} with some parameters)")
        };
        // Every policy runs in the simulator and under `apiary serve`.
        println!("    capabilities: {default}{by_params}; simulator and live");
        for p in s.params {
            println!(
                "    {:<16} {:<14} {}",
                p.key,
                format!("[{}]", p.default),
                p.about
            );
        }
    }
    println!(
        "\nGPU-sharing policies (pods taking thousandths of GPUs, openb traces; docs/sharing.md):"
    );
    for s in apiary_share::POLICIES.specs {
        println!("{:<18} {}", s.name, s.about);
        println!("    simulator only (`--mode fill:RATIO` or `event`)");
    }
}
