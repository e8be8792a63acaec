//! `apiary serve` and the clients (`submit`, `jobs`, `job`, `cancel`, `nodes`, `cordon`,
//! `uncordon`): the live cluster from the command line, as flags in and text out over
//! `apiary-client`. The agent is `apiary-agent`.

use anyhow::{Context, Result, bail};
use apiary_client::submit::{exit_code, exported_env, submit_array, wait_for};
use apiary_client::{Client, jobtime, sbatch};
use apiary_server::config::ServerConfig;
use apiary_server::types::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// `apiary serve --config FILE [--init]`.
pub fn serve(config: &Path, init: bool) -> Result<()> {
    let text =
        std::fs::read_to_string(config).with_context(|| format!("reading {}", config.display()))?;
    let mut cfg = ServerConfig::parse(&text, &config.display().to_string())?;
    let dir = config.parent().unwrap_or(Path::new("."));
    for (f, mode) in cfg.readable_token_files(config, dir) {
        apiary_server::service::log(&format!(
            "warning: {} holds API tokens and group or others may read it (mode {mode:o}): chmod 600 it",
            f.display()
        ));
    }
    cfg.load_tokens(dir)?;
    if let Some(f) = &cfg.carbon_file {
        cfg.carbon_file = Some(dir.join(f));
    }
    if cfg.tokens.is_empty() {
        apiary_server::service::log(
            "warning: no [[tokens]]: the API is open to anyone who can reach it",
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let store = apiary_server::service::open_store(&cfg, init)?;
        // On etcd, several servers may share the state: only the leader serves it.
        #[cfg(feature = "etcd")]
        apiary_server::leader::lead(&store, &cfg).await?;
        let listen = cfg.listen.clone();
        let tokens = cfg.tokens.clone();
        let desc = format!(
            "policy {}, {} nodes, state in {}",
            cfg.policy,
            cfg.nodes.len(),
            store.describe()
        );
        let (h, task) =
            apiary_server::service::start(cfg, store, apiary_server::service::wall_clock()).await?;
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        apiary_server::service::log(&format!(
            "listening on http://{}, {desc}",
            listener.local_addr()?
        ));
        apiary_server::http::serve(listener, h, tokens, shutdown()).await?;
        task.abort();
        Ok(())
    })
}

/// `apiary serve --extender`: HiveD as a Kubernetes scheduler extender.
pub fn serve_extender(config: &Path) -> Result<()> {
    let (cfg, hived) = apiary_server::extender::serve::ExtenderConfig::load(config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        apiary_server::extender::serve::run(cfg, hived, shutdown(), apiary_server::service::log)
            .await
            .map_err(|e| anyhow::anyhow!(e))
    })
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
    apiary_server::service::log("shutting down");
}

/// Where clients find the server: flags, then the environment, then the client config
/// file (`$APIARY_CONFIG`, default `~/.config/apiary/client.toml`, with `server` and
/// `token`), then `http://127.0.0.1:8800`.
#[derive(clap::Args, Clone, Debug)]
pub struct Connection {
    /// Server URL (or APIARY_SERVER).
    #[arg(long, env = "APIARY_SERVER")]
    pub server: Option<String>,
    /// File holding the bearer token (or APIARY_TOKEN_FILE); else APIARY_TOKEN, else
    /// client.toml's `token`. Never on the command line, where every process of the
    /// machine reads it in /proc.
    #[arg(long, env = "APIARY_TOKEN_FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// Refused: a token on the command line is visible to every process of the machine.
    #[arg(long, hide = true)]
    pub token: Option<String>,
}

/// How a client prints what it got, as kubectl's `-o`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Output {
    /// Columns for people.
    #[default]
    Table,
    /// More columns.
    Wide,
    /// The API's JSON, machine values (unix ms).
    Json,
    /// The same as YAML.
    Yaml,
}

/// A client command's connection and output format.
#[derive(clap::Args, Clone, Debug)]
pub struct ClientArgs {
    #[command(flatten)]
    pub conn: Connection,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

impl ClientArgs {
    fn client(&self) -> Result<Client> {
        self.conn.client()
    }

    /// Prints `v` as JSON or YAML when that is the output asked for; false for a table.
    fn machine<T: Serialize>(&self, v: &T) -> Result<bool> {
        match self.output {
            Output::Json => println!("{}", serde_json::to_string_pretty(v)?),
            Output::Yaml => print!("{}", serde_saphyr::to_string(v).context("writing YAML")?),
            Output::Table | Output::Wide => return Ok(false),
        }
        Ok(true)
    }
}

impl Connection {
    fn client(&self) -> Result<Client> {
        if self.token.is_some() {
            bail!(
                "--token on the command line is visible to every process of the machine \
                 (/proc/PID/cmdline) for as long as the client runs: use --token-file FILE \
                 (mode 600), APIARY_TOKEN, or `token` in client.toml"
            );
        }
        let token = match &self.token_file {
            Some(f) => Some(apiary_agent::procs::read_token(f)?),
            None => std::env::var("APIARY_TOKEN").ok().filter(|t| !t.is_empty()),
        };
        Ok(apiary_client::connect(
            self.server.as_deref(),
            token.as_deref(),
        )?)
    }
}

/// What `apiary submit` sends.
#[derive(clap::Args, Debug)]
pub struct Submission {
    /// GPUs (default 1; an elastic job's MAX).
    #[arg(long, short)]
    pub gpus: Option<u32>,
    /// Share one GPU with other jobs: thousandths of it (1-999; 500 is half). The job's
    /// process gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (and, where the node's GPU memory
    /// is known, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) for its share.
    #[arg(long, value_name = "THOUSANDTHS", conflicts_with = "gpus")]
    pub gpu_milli: Option<u32>,
    /// CPU cores a GPU-sharing job needs on its node (2, 0.5), with --gpu-milli.
    #[arg(long, value_name = "CORES", requires = "gpu_milli")]
    pub cpu: Option<String>,
    /// Memory a GPU-sharing job needs on its node, as sbatch's --mem (4096, 16G), with
    /// --gpu-milli.
    #[arg(long, value_name = "SIZE[K|M|G|T]", requires = "gpu_milli")]
    pub mem: Option<String>,
    /// Where the job keeps its checkpoints on the nodes: every attempt gets it as
    /// APIARY_CHECKPOINT_DIR, and APIARY_RESTART_COUNT says how many came before.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<String>,
    /// Seconds between SIGTERM and SIGKILL when an attempt is stopped (preempted,
    /// cancelled, drained), to save a checkpoint (default: the server's grace_s).
    #[arg(long, value_name = "SECONDS")]
    pub grace: Option<f64>,
    /// Exit codes that mean the infrastructure failed, not the job (comma-separated):
    /// such an attempt is requeued as after a lost node.
    #[arg(long, value_name = "CODE,...", value_delimiter = ',')]
    pub failure_exit_codes: Vec<i32>,
    /// Virtual cluster.
    #[arg(long)]
    pub vc: Option<String>,
    /// GPU model the job needs (a node's `gpu_type`).
    #[arg(long)]
    pub gpu_type: Option<String>,
    /// Priority (larger first).
    #[arg(long, default_value_t = 0)]
    pub priority: i32,
    /// Name.
    #[arg(long)]
    pub name: Option<String>,
    /// Environment, KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Working directory on the node (default: the directory you submit from, as
    /// sbatch's).
    #[arg(long, visible_alias = "workdir", value_name = "DIR")]
    pub chdir: Option<String>,
    /// Which of your environment variables the job gets, as sbatch's --export: ALL (the
    /// default; less the variables the agent sets for each job, APIARY_* and
    /// CUDA_VISIBLE_DEVICES, and the ones that name you or your shell: USER, LOGNAME,
    /// HOME, PWD, OLDPWD, SHLVL, _), NONE, or a list of NAME and NAME=VALUE (add ALL to
    /// the list for the rest too). --env adds to it.
    #[arg(long, value_name = "ALL|NONE|NAME[=VALUE],...", default_value = "ALL")]
    pub export: String,
    /// Estimated run time, seconds (at --gpus GPUs for an elastic job).
    #[arg(long = "estimate")]
    pub estimate_s: Option<f64>,
    /// When the job should be done, as sbatch's --deadline: now+2hours, a local date or
    /// date-time (2026-11-27T18:00), or unix seconds. Deadline-aware policies (edf,
    /// elasticflow) plan for it, and ElasticFlow's admission control refuses a job
    /// whose deadline cannot be met.
    #[arg(long, value_name = "TIME")]
    pub deadline: Option<String>,
    /// Resizable between MIN and MAX GPUs (powers of two) by checkpoint and restart:
    /// under an elastic policy (elasticflow, edf, greenflow) the job is stopped with
    /// its grace to save a checkpoint and restarted at its new size, told by
    /// APIARY_NUM_GPUS; other policies run it at --gpus (default MAX).
    #[arg(long, value_name = "MIN-MAX", conflicts_with = "gpu_milli")]
    pub elastic: Option<String>,
    /// An elastic job's throughput at each power-of-two count of its range, GPUS:RATE
    /// pairs in any unit (1:1,2:1.9,4:3.4); default: linear in the count.
    #[arg(long, value_name = "GPUS:RATE,...", requires = "elastic")]
    pub throughput: Option<String>,
    /// An adaptive job (AdaptDL's) and its batch limits: init=B,max=B,local=MIN-MAX.
    /// Under pollux it gets the GPUs its goodput model earns, reported as AdaptDL's
    /// scheduling hints written to $APIARY_HINTS, and is resized by checkpoint and
    /// restart (told APIARY_NUM_GPUS).
    #[arg(
        long,
        value_name = "init=B,max=B,local=MIN-MAX",
        conflicts_with = "gpu_milli"
    )]
    pub adaptive: Option<String>,
    /// The model the job trains, as Synergy's CPU measurements name it (res18, res50,
    /// transformer, ...; an unknown name is refused with the list). Under goldminer it
    /// gets CPUs for its input pipeline along that model's speed curve: the agent pins
    /// it to them (APIARY_CPUS at start; os.sched_getaffinity(0) as they change).
    /// GreenFlow's power limits read Zeus's curve for it.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// The size of the dataset it reads, GB. Under silod (with --model) it gets a share
    /// of the cluster's cache and remote-storage bandwidth by it, handed over in the
    /// file $APIARY_IO for its data loader to keep to.
    #[arg(long, value_name = "GB")]
    pub dataset_gb: Option<f64>,
    /// Time limit of each attempt, as sbatch's --time: MM, MM:SS, HH:MM:SS, D-HH,
    /// D-HH:MM or D-HH:MM:SS. Past it the job is stopped and fails with `timeout`.
    #[arg(long, short = 't', value_name = "TIME")]
    pub time: Option<String>,
    /// Start only after other jobs, as sbatch's --dependency: afterok:ID[:ID...] (they
    /// succeeded; if one fails or is cancelled, this job is cancelled) or
    /// afterany:ID[:ID...] (they ended), several joined by commas.
    #[arg(long, short = 'd', value_name = "TYPE:ID[:ID...]")]
    pub dependency: Option<String>,
    /// Submit a job array, as sbatch's --array: 0-99, 1,3,5 or 0-15:4 (a step), with %K
    /// to run at most K tasks at once. Each task gets APIARY_ARRAY_TASK_ID, and
    /// APIARY_ARRAY_TASK_COUNT, _MIN and _MAX.
    #[arg(long, short = 'a', value_name = "INDICES[%K]")]
    pub array: Option<String>,
    /// Wait until the job ends and exit with its exit code (sbatch --wait): 0 when it
    /// succeeded, its first non-zero exit code when it failed, 1 when it was cancelled,
    /// refused or killed.
    #[arg(long)]
    pub wait: bool,
    /// Program and arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `apiary submit`.
pub fn submit(c: &ClientArgs, s: Submission) -> Result<()> {
    let exported = exported_env(&s.export, std::env::vars_os())?;
    if exported.unreadable > 0 {
        eprintln!(
            "note: {} variables that are not UTF-8 were not exported",
            exported.unreadable
        );
    }
    if !exported.secrets.is_empty() {
        eprintln!(
            "note: left out of --export=ALL as they look like secrets (name them to send \
             them, e.g. --export=ALL,{}): {}",
            exported.secrets[0],
            exported.secrets.join(" ")
        );
    }
    let mut e = exported.env;
    for kv in &s.env {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--env '{kv}' is not KEY=VALUE"))?;
        e.insert(k.to_string(), v.to_string());
    }
    let deps = match &s.dependency {
        Some(d) => sbatch::dependencies(d)?,
        None => sbatch::Dependencies::default(),
    };
    let array = s.array.as_deref().map(sbatch::array).transpose()?;
    let elastic = s
        .elastic
        .as_deref()
        .map(|r| apiary_client::elastic::parse(r, s.throughput.as_deref()))
        .transpose()?;
    let deadline_unix_s = match &s.deadline {
        None => None,
        Some(t) => Some(
            jobtime::parse_deadline(t, apiary_server::service::unix_ms()).with_context(|| {
                format!("--deadline '{t}': give now+2hours, 2026-11-27T18:00 or unix seconds")
            })? / 1000,
        ),
    };
    let gpus = match (s.gpu_milli, s.gpus, &elastic) {
        (Some(_), _, _) => 1,
        (None, Some(g), _) => g,
        (None, None, Some(e)) => e.max_gpus,
        (None, None, None) => 1,
    };
    let spec = JobSpec {
        name: s.name,
        gpus,
        gpu_milli: s.gpu_milli,
        cpu_milli: s.cpu.as_deref().map(sbatch::cpu_milli).transpose()?,
        memory_mib: s.mem.as_deref().map(sbatch::mem_mib).transpose()?,
        gpu_type: s.gpu_type,
        vc: s.vc,
        priority: s.priority,
        command: s.command,
        env: e,
        workdir: match s.chdir {
            Some(d) => Some(d),
            None => Some(
                std::env::current_dir()
                    .context("finding the directory you submit from (give --chdir)")?
                    .to_string_lossy()
                    .into_owned(),
            ),
        },
        estimated_duration_s: s.estimate_s,
        deadline_unix_s,
        restart: RestartPolicy {
            failure_exit_codes: s.failure_exit_codes,
            ..RestartPolicy::default()
        },
        array: None,
        time_limit_s: match &s.time {
            None => None,
            Some(t) => Some(jobtime::parse_slurm_time(t).with_context(|| {
                format!("--time '{t}': give MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")
            })?),
        },
        after_ok: deps.after_ok,
        after_any: deps.after_any,
        checkpoint_dir: s.checkpoint_dir,
        grace_s: s.grace,
        elastic,
        adaptive: s
            .adaptive
            .as_deref()
            .map(apiary_client::elastic::parse_adaptive)
            .transpose()?,
        model: s.model,
        dataset_gb: s.dataset_gb,
    };
    let client = c.client()?;
    let mut ids = Vec::new();
    match &array {
        None => {
            let r: JobRecord = client.post("/v1/jobs", &spec)?;
            if !c.machine(&r)? {
                println!("Submitted job {}", r.id);
            }
            ids.push(r.id);
        }
        Some(a) => {
            let records = submit_array(&client, &spec, a)?;
            ids.extend(records.iter().map(|r| r.id));
            if !c.machine(&records)? {
                println!(
                    "Submitted array of {} jobs: {}",
                    ids.len(),
                    apiary_report::present::id_ranges(&ids)
                );
            }
        }
    }
    if s.wait {
        let mut code = 0;
        for &id in &ids {
            let end = wait_for(&client, id)?;
            if c.output == Output::Table || c.output == Output::Wide {
                eprintln!(
                    "job {} {} after {} (exit {})",
                    end.id,
                    end.state.as_str(),
                    jobtime::squeue_time(jobtime::run_ms(&end, apiary_server::service::unix_ms())),
                    jobtime::exit_text(&end)
                );
            }
            if code == 0 {
                code = exit_code(&end);
            }
        }
        if code != 0 {
            std::process::exit(code);
        }
    }
    Ok(())
}

/// What `apiary jobs` lists.
pub struct Listing {
    /// Only this VC.
    pub vc: Option<String>,
    /// Only this state.
    pub state: Option<String>,
    /// Finished jobs too.
    pub all: bool,
    /// Archived jobs that ended since then too (sacct's --starttime).
    pub since: Option<String>,
    /// Only this user's.
    pub user: Option<String>,
}

/// `apiary jobs` (like squeue).
pub fn jobs(c: &ClientArgs, l: &Listing, watch: Option<f64>) -> Result<()> {
    let Some(every) = watch else {
        return jobs_once(c, l);
    };
    if !(every.is_finite() && every >= 0.1) {
        bail!("--watch takes seconds, at least 0.1 (got {every})");
    }
    use std::io::IsTerminal as _;
    let tty = std::io::stdout().is_terminal();
    loop {
        if tty {
            // Redraw in place, as `watch` does.
            print!("\x1b[H\x1b[2J");
        }
        println!(
            "Every {every} s: apiary jobs    {}",
            jobtime::local(apiary_server::service::unix_ms())
        );
        jobs_once(c, l)?;
        if !tty {
            println!();
        }
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        std::thread::sleep(Duration::from_secs_f64(every));
    }
}

fn jobs_once(c: &ClientArgs, l: &Listing) -> Result<()> {
    let (vc, state, all) = (l.vc.as_deref(), l.state.as_deref(), l.all);
    let mut q = Vec::new();
    if let Some(v) = vc {
        q.push(format!("vc={v}"));
    }
    if let Some(u) = &l.user {
        q.push(format!("user={u}"));
    }
    match state {
        Some(s) => q.push(format!("state={s}")),
        // What squeue shows: every unfinished job, however many finished after it.
        None if !all => q.push("state=queued,running".into()),
        None => {}
    }
    let query = |path: &str, q: &[String]| {
        if q.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{}", q.join("&"))
        }
    };
    let client = c.client()?;
    let mut list: Vec<JobRecord> = client.get_all(&query("/v1/jobs", &q))?;
    if let Some(when) = &l.since {
        let now = apiary_server::service::unix_ms();
        let Some(ms) = jobtime::parse_since(when, now) else {
            bail!(
                "--since {when}: expected now-3days, now-6hours, 2026-11-20, \
                 2026-11-20T10:00 or unix seconds"
            );
        };
        q.push(format!("since={}", ms / 1000));
        let archived: Vec<JobRecord> = client.get_all(&query("/v1/jobs/archived", &q))?;
        let hot: std::collections::BTreeSet<u64> = list.iter().map(|r| r.id).collect();
        list.extend(archived.into_iter().filter(|r| !hot.contains(&r.id)));
        list.sort_by_key(|r| std::cmp::Reverse(r.id));
    }
    if c.machine(&list)? {
        return Ok(());
    }
    let now = apiary_server::service::unix_ms();
    let wide = c.output == Output::Wide;
    let mut head = format!(
        "{:>8}  {:<12} {:<16} {:<10} {:<10} {:>4} {:>11}",
        "JOBID", "VC", "NAME", "USER", "STATE", "GPUS", "TIME"
    );
    if all || wide {
        head.push_str(&format!(" {:>11} {:>6}", "ELAPSED", "EXIT"));
    }
    if wide {
        head.push_str(&format!(
            " {:>4} {:<8} {:<19} {:>11} {:<24}",
            "PRIO", "GPUTYPE", "SUBMITTED", "TIMELIMIT", "WORKDIR"
        ));
    }
    println!("{head}  NODES(REASON)");
    for r in list {
        let name = r
            .spec
            .name
            .clone()
            .or_else(|| r.spec.command.first().cloned())
            .unwrap_or_default();
        let nodes = if let Some(why) = &r.reason {
            format!("({why})")
        } else if r.state == JobState::Running || (wide && !r.parts.is_empty()) {
            r.parts
                .iter()
                .map(|p| p.node.as_str())
                .collect::<Vec<_>>()
                .join(",")
        } else {
            String::new()
        };
        let mut line = format!(
            "{:>8}  {:<12} {:<16} {:<10} {:<10} {:>4} {:>11}",
            r.id,
            r.vc,
            name.chars().take(16).collect::<String>(),
            r.user.as_deref().unwrap_or("-"),
            r.state.as_str(),
            gpus_text(&r),
            jobtime::squeue_time(jobtime::run_ms(&r, now)),
        );
        if all || wide {
            line.push_str(&format!(
                " {:>11} {:>6}",
                jobtime::elapsed_ms(&r, now).map_or("-".into(), jobtime::squeue_time),
                jobtime::exit_text(&r)
            ));
        }
        if wide {
            line.push_str(&format!(
                " {:>4} {:<8} {:<19} {:>11} {:<24}",
                r.spec.priority,
                r.spec.gpu_type.as_deref().unwrap_or("any"),
                jobtime::local(r.submitted_ms),
                time_limit(&r),
                r.spec.workdir.as_deref().unwrap_or("-")
            ));
        }
        println!("{line}  {nodes}");
    }
    Ok(())
}

/// A job's GPUs: a count, or the share of one (`0.5`); an elastic job's count is its
/// last attempt's (what it asked for before it ran).
fn gpus_text(r: &JobRecord) -> String {
    let s = &r.spec;
    match (s.gpu_milli, &s.elastic) {
        (Some(m), _) => format!("{}", f64::from(m) / 1000.0),
        (None, Some(_)) if !r.parts.is_empty() => r
            .parts
            .iter()
            .map(|p| p.gpus.len())
            .sum::<usize>()
            .to_string(),
        (None, _) => s.gpus.to_string(),
    }
}

/// A job's time limit as squeue prints it (`UNLIMITED` when it has none).
fn time_limit(r: &JobRecord) -> String {
    r.spec.time_limit_s.map_or("UNLIMITED".into(), |s| {
        jobtime::squeue_time((s * 1000.0) as u64)
    })
}

/// `apiary job ID`.
pub fn job(c: &ClientArgs, id: u64) -> Result<()> {
    let r: JobRecord = c.client()?.get(&format!("/v1/jobs/{id}"))?;
    if c.machine(&r)? {
        return Ok(());
    }
    let now = apiary_server::service::unix_ms();
    println!(
        "job {}  {}  vc {}  user {}  {} GPUs  attempt {}",
        r.id,
        r.state.as_str(),
        r.vc,
        r.user.as_deref().unwrap_or("-"),
        gpus_text(&r),
        r.attempt
    );
    if let Some(e) = &r.spec.elastic {
        println!(
            "elastic  {}-{} GPUs, {} when not resized",
            e.min_gpus, e.max_gpus, r.spec.gpus
        );
    }
    if let Some(a) = &r.spec.adaptive {
        let (lo, hi) = a.local_bsz_bounds;
        println!(
            "adaptive batch {} to {}, {lo}-{hi} per GPU; {}",
            a.init_batch_size,
            a.max_batch_size,
            r.hints
                .as_ref()
                .map_or("no hints yet".to_string(), |h| format!(
                    "hints: {} replicas profiled{}",
                    h.max_profiled_replicas.unwrap_or(0),
                    h.global_batch_size
                        .map_or(String::new(), |b| format!(", batch {b}"))
                ))
        );
    }
    if let Some(m) = &r.spec.model {
        println!(
            "model    {m}{}{}",
            r.spec
                .dataset_gb
                .map_or(String::new(), |g| format!(", dataset {g} GB")),
            r.cpus.map_or(String::new(), |c| format!(
                ", {c:.2} CPUs for its input pipeline"
            ))
        );
    }
    if let Some(io) = &r.io {
        println!(
            "io       {:.1} GB cached, {:.1} MB/s from remote storage",
            io.cache_bytes / 1e9,
            io.remote_bytes_per_s / 1e6
        );
    }
    if let Some(p) = r.power_limit {
        println!("power    {:.0} % of its GPUs' top limit", p * 100.0);
    }
    println!("command  {}", r.spec.command.join(" "));
    println!(
        "workdir  {}",
        r.spec.workdir.as_deref().unwrap_or("(the agent's)")
    );
    println!("limit    {}", time_limit(&r));
    if let Some(why) = &r.reason {
        println!("waiting  {why}");
    }
    println!(
        "submitted {} ({})",
        jobtime::local(r.submitted_ms),
        apiary_model::fmt_age(now, r.submitted_ms)
    );
    println!(
        "time     {} run{}, exit {}",
        jobtime::squeue_time(jobtime::run_ms(&r, now)),
        jobtime::elapsed_ms(&r, now).map_or(String::new(), |e| format!(
            ", {} since its first start",
            jobtime::squeue_time(e)
        )),
        jobtime::exit_text(&r)
    );
    for p in &r.parts {
        println!(
            "part     {} GPUs {:?}{}{}",
            p.node,
            p.gpus,
            p.gpu_milli
                .map_or(String::new(), |m| format!(" ({m}/1000 of it)")),
            p.exit.map_or(String::new(), |e| format!(" exit {e}"))
        );
    }
    for t in &r.history {
        println!(
            "{}  {:>8}  {:<10} {}",
            jobtime::local(t.at_ms),
            apiary_model::fmt_age(now, t.at_ms),
            t.event,
            t.detail
        );
    }
    Ok(())
}

/// `apiary logs ID`: the end of each node's output of the job's last attempt (kept
/// by the server once the processes exited).
pub fn logs(c: &ClientArgs, id: u64, follow: bool) -> Result<()> {
    let client = c.client()?;
    let r: JobRecord = client.get(&format!("/v1/jobs/{id}"))?;
    if follow {
        return follow_logs(&client, r);
    }
    let live: Vec<PartOutput> = client.get(&format!("/v1/jobs/{id}/output"))?;
    let parts: Vec<_> = r
        .parts
        .iter()
        .map(|p| {
            let held = live.iter().find(|l| l.node == p.node);
            serde_json::json!({
                "node": p.node, "exit": p.exit, "output_tail": p.output_tail,
                "live": held.map(|l| &l.data), "live_start": held.map(|l| l.start),
            })
        })
        .collect();
    if c.machine(&parts)? {
        return Ok(());
    }
    if r.parts.is_empty() {
        bail!("job {id} has not run yet ({})", r.state.as_str());
    }
    let many = r.parts.len() > 1;
    for p in &r.parts {
        if many {
            println!("==> {} (attempt {}) <==", p.node, r.attempt);
        }
        match (p.exit, live.iter().find(|l| l.node == p.node)) {
            (None, Some(l)) => {
                if l.start > 0 {
                    println!("[apiary: the first {} bytes are not kept]", l.start);
                }
                print!("{}", l.data);
            }
            (None, None) => println!("(running on {}; no output yet)", p.node),
            (Some(_), _) => print!("{}", p.output_tail),
        }
    }
    Ok(())
}

/// `apiary logs -f`: prints each part's output as its agent streams it, until the job
/// ended and every part's output arrived (or, for output the server no longer holds,
/// the end of it that the job's record keeps).
fn follow_logs(client: &Client, mut r: JobRecord) -> Result<()> {
    use std::io::Write as _;
    let id = r.id;
    let mut printed: BTreeMap<String, (u32, u64)> = BTreeMap::new();
    let mut quiet_polls = 0u32;
    loop {
        let live: Vec<PartOutput> = client.get(&format!("/v1/jobs/{id}/output"))?;
        let many = live.len() > 1 || r.parts.len() > 1;
        let mut out = std::io::stdout().lock();
        let mut any = false;
        for l in &live {
            let (attempt, done) = printed.get(&l.node).copied().unwrap_or((l.attempt, 0));
            let done = if attempt == l.attempt { done } else { 0 };
            let end = l.start + l.data.len() as u64;
            if end <= done {
                continue;
            }
            if many {
                writeln!(out, "==> {} (attempt {}) <==", l.node, l.attempt)?;
            }
            if done < l.start {
                writeln!(out, "[apiary: {} bytes not kept]", l.start - done)?;
            }
            let mut from = done.saturating_sub(l.start) as usize;
            while !l.data.is_char_boundary(from) {
                from += 1;
            }
            write!(out, "{}", &l.data[from..])?;
            printed.insert(l.node.clone(), (l.attempt, end));
            any = true;
        }
        out.flush()?;
        drop(out);
        if r.state.terminal() {
            let all_in = !r.parts.is_empty()
                && r.parts
                    .iter()
                    .all(|p| live.iter().any(|l| l.node == p.node && l.eof));
            quiet_polls = if any { 0 } else { quiet_polls + 1 };
            if all_in {
                return Ok(());
            }
            // The server holds none of it (restarted, or long ago): the record's tail.
            if live.is_empty() || quiet_polls >= 6 {
                if live.is_empty() {
                    for p in &r.parts {
                        print!("{}", p.output_tail);
                    }
                }
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(500));
        r = client.get(&format!("/v1/jobs/{id}"))?;
    }
}

/// `apiary cancel ID`.
pub fn cancel(
    c: &ClientArgs,
    ids: &[String],
    name: Option<String>,
    state: Option<&str>,
    user: Option<String>,
) -> Result<()> {
    use apiary_client::cancel::{Filters, select, target};
    let targets = ids
        .iter()
        .map(|t| target(t))
        .collect::<Result<Vec<_>, _>>()?;
    let state = match state {
        None => None,
        Some("queued" | "pending" | "PENDING" | "PD") => Some(JobState::Queued),
        Some("running" | "RUNNING" | "R") => Some(JobState::Running),
        Some(s) => bail!("--state {s}: only unfinished jobs cancel: queued or running"),
    };
    let f = Filters { name, state, user };
    if targets.is_empty() && !f.any() {
        bail!("cancel what? give job ids (12, 12_3, 12_[3-5]) or --name, --state, --user");
    }
    let client = c.client()?;
    let unfinished: Vec<JobRecord> = client.get_all("/v1/jobs?state=queued,running")?;
    let (chosen, absent) = select(&unfinished, &targets, &f);
    let mut done = Vec::new();
    let mut failed = 0;
    // Ids not among the unfinished jobs are asked too: the server says why not.
    for id in chosen.iter().chain(absent.iter().filter(|_| !f.any())) {
        match client.post::<_, JobRecord>(&format!("/v1/jobs/{id}/cancel"), &serde_json::json!({}))
        {
            Ok(r) => done.push(r),
            Err(e) => {
                eprintln!("error: job {id}: {e}");
                failed += 1;
            }
        }
    }
    if !c.machine(&done)? {
        for r in &done {
            println!("Cancelled job {}", r.id);
        }
        if done.is_empty() && failed == 0 {
            println!("No job matched");
        }
    }
    if failed > 0 {
        bail!("{failed} of {} jobs not cancelled", failed + done.len());
    }
    Ok(())
}

/// `apiary nodes` (like sinfo).
pub fn nodes(c: &ClientArgs) -> Result<()> {
    let list: Vec<NodeStatus> = c.client()?.get("/v1/nodes")?;
    if c.machine(&list)? {
        return Ok(());
    }
    println!(
        "{:<16} {:<8} {:<9} {:>4} {:>4}  {:<16} JOBS",
        "NODE", "HEALTH", "GPU", "GPUS", "FREE", "SHARED"
    );
    for n in list {
        let health = match (n.health, n.cordoned) {
            (_, true) => "cordoned",
            (NodeHealth::Up, _) => "up",
            (NodeHealth::Down, _) => "down",
            (NodeHealth::Unknown, _) => "unknown",
        };
        // Each shared GPU as GPU:thousandths held.
        let shared = if n.shares.is_empty() {
            "-".to_string()
        } else {
            n.shares
                .iter()
                .map(|s| format!("{}:{}", s.gpu, s.used_milli))
                .collect::<Vec<_>>()
                .join(",")
        };
        println!(
            "{:<16} {:<8} {:<9} {:>4} {:>4}  {:<16} {}",
            n.name,
            health,
            n.gpu_type,
            n.gpus,
            n.free_gpus,
            shared,
            n.jobs
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        if !n.services.is_empty() {
            // What the online services beside the jobs use, GPU:SM%/memory%.
            let loads: Vec<String> = n
                .services
                .iter()
                .map(|l| format!("{}:{:.0}/{:.0}", l.gpu, l.sm * 100.0, l.memory * 100.0))
                .collect();
            println!("{:<16} services (GPU:SM%/memory%) {}", "", loads.join(" "));
        }
    }
    Ok(())
}

/// `apiary cordon|uncordon|drain NODE`.
pub fn node_action(c: &Connection, node: &str, verb: &str) -> Result<()> {
    let v: serde_json::Value = c
        .client()?
        .post(&format!("/v1/nodes/{node}/{verb}"), &serde_json::json!({}))?;
    match v.get("requeued") {
        Some(n) => println!("node {node} drained: {n} jobs requeued"),
        None => println!("node {node} {verb}ed"),
    }
    Ok(())
}

/// `apiary vcs`.
pub fn vcs(c: &ClientArgs) -> Result<()> {
    let list: Vec<serde_json::Value> = c.client()?.get("/v1/vcs")?;
    if c.machine(&list)? {
        return Ok(());
    }
    let num = |v: &serde_json::Value| v.as_u64().map_or("-".to_string(), |n| n.to_string());
    println!(
        "{:<16} {:<8} {:>6} {:>6} {:>8} {:>7} {:>7}",
        "VC", "SHARING", "QUOTA", "NODES", "GPUS", "RUNNING", "QUEUED"
    );
    for v in list {
        println!(
            "{:<16} {:<8} {:>6} {:>6} {:>8} {:>7} {:>7}",
            v["name"].as_str().unwrap_or(""),
            v["sharing"].as_str().unwrap_or(""),
            num(&v["quota_gpus"]),
            num(&v["nodes"]),
            num(&v["gpus_running"]),
            num(&v["running"]),
            num(&v["queued"])
        );
    }
    Ok(())
}

/// `apiary quota VC GPUS`.
pub fn quota(c: &ClientArgs, vc: &str, gpus: u64) -> Result<()> {
    let client = c.client()?;
    let v: serde_json::Value = client.put(
        &format!("/v1/vcs/{vc}"),
        &serde_json::json!({"quota_gpus": gpus}),
    )?;
    if !c.machine(&v)? {
        println!("VC {vc}: quota {gpus} GPUs");
    }
    Ok(())
}
