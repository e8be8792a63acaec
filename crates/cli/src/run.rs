//! `apiary simulate` and `apiary compare`: their flags, the run of each policy (on the
//! simulator or the live driver), and what they print and write. The setup that decides
//! results is [`apiary_sim::experiment`].

use crate::settings::{self, Setting};
use anyhow::{Context, Result, bail};
use apiary_model::{Cluster, Job, RunOutcome};
use apiary_policy::{Params, registry};
use apiary_report::{Percentile, Record, Summary, TraceRecord};
use apiary_sim::experiment::{self, SpeedChoice};
use apiary_sim::{Backend, Config, Engine, Mode, Stack};
use apiary_trace::{Format, ReadOptions};
use clap::Args;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

const SAMPLE_TRACE: &str = "testdata/traces/philly-sample.csv";

pub(crate) const SAMPLE_TRACE_BYTES: &[u8] =
    include_bytes!("../../../testdata/traces/philly-sample.csv");

#[derive(Args, Clone)]
pub(crate) struct ReadArgs {
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
pub(crate) struct RunArgs {
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
    /// Grid carbon intensity for energy and carbon: a grid apiary ships (BPAT, CISO,
    /// ERCO, MISO, NYIS, PJM: EIA-930 2022, hourly) or a CSV of hourly g/kWh
    /// (docs/carbon.md). Default: a constant 289 g/kWh, the six grids' mean.
    #[arg(long, value_name = "GRID|FILE")]
    carbon: Option<String>,
    /// The facility's power usage effectiveness, multiplying the GPUs' energy.
    #[arg(long, default_value_t = 1.0)]
    pue: f64,
    /// Cap every GPU at this fraction of its type's top power limit (0.3 to 1): jobs
    /// run slower and draw less, as Zeus measured per network (docs/carbon.md).
    #[arg(long, value_name = "FRACTION")]
    power_limit: Option<f64>,
    /// Model data loading: jobs read their datasets through a cache and shared remote
    /// bandwidth (docs/io.md). `default`, or `key=value,...` over it:
    /// cache=lru|uniform|coordl, cache_gb_per_gpu (25), bandwidth_mbs_per_gpu (20).
    #[arg(long, value_name = "default|KEY=VALUE,...")]
    io: Option<String>,
    /// Model input pipelines: each job's preprocessing runs on CPUs, Synergy's measured
    /// speed by CPUs per GPU (docs/io.md). `default` (3 CPUs per GPU) or
    /// `cpus_per_gpu=N`.
    #[arg(long, value_name = "default|cpus_per_gpu=N")]
    cpu: Option<String>,
    /// Model online inference services on the first nodes' GPUs, beside which offline
    /// jobs run at the SM share they get (MuxFlow's sharing, docs/sharing.md).
    /// `default`, or `key=value,...` over it: hosts (0.5, the share of nodes serving),
    /// peak_min, peak_max, trough, peak_hour, spike_prob, spike_factor,
    /// spike_minutes, interference.
    #[arg(long, value_name = "default|KEY=VALUE,...")]
    online: Option<String>,
    /// Model failures: a preset (llama3, philly) or a TOML file of failure classes
    /// (docs/failures.md). Struck jobs lose the work since their last checkpoint that
    /// survives, restore, restart and queue again; node failures take nodes down.
    #[arg(long, value_name = "PRESET|FILE")]
    failures: Option<String>,
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

impl RunArgs {
    pub(crate) fn out(&self) -> Option<&Path> {
        self.out.as_deref()
    }
    pub(crate) fn trace_path(&self) -> Option<&Path> {
        self.trace.as_deref()
    }
    pub(crate) fn cluster(&self) -> &str {
        &self.cluster
    }
    pub(crate) fn format(&self) -> Option<&str> {
        self.read.format.as_deref()
    }
    pub(crate) fn quiet(&self) -> bool {
        self.quiet
    }
    /// The simulator options as a sweep file's `[sim]` table.
    pub(crate) fn sweep_sim(&self) -> toml::Table {
        let mut t = toml::Table::new();
        t.insert("mode".into(), self.mode.clone().into());
        t.insert("restart_overhead".into(), self.restart_overhead.into());
        t.insert("per_event_overhead".into(), self.per_event_overhead.into());
        t.insert("percentile".into(), self.percentile.clone().into());
        t.insert("speed".into(), self.speed.clone().into());
        if let Some(c) = &self.carbon {
            t.insert("carbon".into(), c.clone().into());
        }
        t.insert("pue".into(), self.pue.into());
        if let Some(f) = self.power_limit {
            t.insert("power_limit".into(), f.into());
        }
        if let Some(io) = &self.io {
            t.insert("io".into(), io.clone().into());
        }
        if let Some(cpu) = &self.cpu {
            t.insert("cpu".into(), cpu.clone().into());
        }
        if let Some(online) = &self.online {
            t.insert("online".into(), online.clone().into());
        }
        if let Some(f) = &self.failures {
            t.insert("failures".into(), f.clone().into());
        }
        if let Some(d) = &self.speed_data {
            t.insert("speed_data".into(), d.display().to_string().into());
        }
        t
    }
}

#[derive(Args)]
pub(crate) struct SimArgs {
    /// Policy (see `apiary policies`).
    #[arg(long, short, default_value = "tiresias")]
    policy: String,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
pub(crate) struct CompareArgs {
    /// Comma-separated policies.
    #[arg(long, short, default_value = "fifo,sjf,srtf,srsf,tiresias")]
    policies: String,
    /// Repeat the comparison over seeds 0..N and report means with 95 % intervals and
    /// seed-paired ratios against the first policy (as `apiary sweep` does; `-o DIR`
    /// keeps the sweep file, results and report in DIR/seeds).
    #[arg(long, value_name = "N")]
    seeds: Option<u64>,
    /// With --seeds: jobs each seed draws from the trace (in trace order). Without it
    /// every seed runs every job, and only what the simulator draws changes.
    #[arg(long, value_name = "JOBS", requires = "seeds")]
    sample: Option<usize>,
    /// With -o: also write each chart of report.html as a pgfplots figure for papers
    /// (`charts/NAME.tex`, beside its SVG and CSV).
    #[arg(long, value_enum)]
    figures: Option<crate::figures::Figures>,
    #[command(flatten)]
    run: RunArgs,
}

pub(crate) fn read_opts(a: &ReadArgs) -> Result<ReadOptions> {
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
        threads: None,
    })
}

fn load_trace(path: Option<&Path>, opts: &ReadOptions, quiet: bool) -> Result<(String, Vec<Job>)> {
    let (name, trace) = match path {
        Some(p) => (p.display().to_string(), apiary_trace::read(p, opts)?),
        None => {
            // The committed sample, embedded so the default run works from any directory.
            let dir = std::env::temp_dir().join(format!("apiary-sample-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let f = dir.join("philly-sample.csv");
            std::fs::write(&f, SAMPLE_TRACE_BYTES)?;
            let t = apiary_trace::read(&f, opts);
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
    let Some(mode) = Mode::parse(&a.mode) else {
        bail!(
            "--mode must be 'event' or 'slot:SECONDS' with 0.001 <= SECONDS <= 10^12 (got '{}')",
            a.mode
        );
    };
    let Some(restart_overhead) = apiary_model::time::secs_f64(a.restart_overhead) else {
        bail!("--restart-overhead must be a number of seconds, 0 to 10^12");
    };
    if !(a.pue.is_finite() && (1.0..=10.0).contains(&a.pue)) {
        bail!("--pue must be between 1 and 10 (got {})", a.pue);
    }
    if let Some(f) = a.power_limit
        && !(f.is_finite() && (0.3..=1.0).contains(&f))
    {
        bail!("--power-limit must be a fraction of the top limit from 0.3 to 1 (got {f})");
    }
    let carbon = match &a.carbon {
        Some(c) => Some(std::sync::Arc::new(apiary_trace::carbon::read_intensity(
            c,
        )?)),
        None => None,
    };
    let io =
        a.io.as_deref()
            .map(apiary_model::io::Storage::parse)
            .transpose()?;
    let cpu = a
        .cpu
        .as_deref()
        .map(apiary_model::cpu::CpuPool::parse)
        .transpose()?;
    let online = a
        .online
        .as_deref()
        .map(apiary_model::online::OnlineLoad::parse)
        .transpose()?;
    let failures = a
        .failures
        .as_deref()
        .map(crate::checkpoint::failure_setting)
        .transpose()?;
    Ok(Config {
        mode,
        restart_overhead,
        per_event_overhead: a.per_event_overhead,
        seed: a.seed,
        carbon,
        pue: a.pue,
        io,
        cpu,
        power_limit: a.power_limit,
        online,
        failures,
    })
}

fn percentile(a: &RunArgs) -> Result<Percentile> {
    match a.percentile.as_str() {
        "nearest" => Ok(Percentile::NearestRank),
        "floor" => Ok(Percentile::Floor),
        p => bail!("--percentile must be 'nearest' or 'floor' (got '{p}')"),
    }
}

/// A progress bar on a terminal's stderr (hidden when quiet or redirected).
pub(crate) fn progress_bar(
    quiet: bool,
    len: usize,
    prefix: &str,
    template: &str,
) -> indicatif::ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(len as u64);
    b.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    b.set_prefix(prefix.to_string());
    b
}

/// Bytes as lower-case hex (a SHA-256 for a record).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// When a report is made, UTC to the second: `SOURCE_DATE_EPOCH` (the reproducible-builds
/// convention) when set, so a report can be made byte-identical again, else now.
pub(crate) fn made_date() -> String {
    let ts = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .unwrap_or_else(jiff::Timestamp::now);
    ts.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// Events per second as people read a rate: `1.08 M events/s`, `2.4 k events/s`,
/// `12 events/s` (a slow policy's rate no longer shows as 0.00 M).
pub(crate) fn events_rate(events: u64, secs: f64) -> String {
    let r = events as f64 / secs.max(1e-9);
    if r >= 1e6 {
        format!("{:.2} M events/s", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1} k events/s", r / 1e3)
    } else {
        format!("{r:.0} events/s")
    }
}

pub(crate) fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn run_one(
    setting: &Setting,
    params: &Params,
    a: &RunArgs,
    cluster: &Cluster,
    mut jobs: Vec<Job>,
    cfg: &Config,
) -> Result<RunOutcome> {
    let (policy, label) = (setting.policy.as_str(), setting.label.as_str());
    // A setting's own storage or CPU pool (`io.KEY`, `cpu.KEY`) over the run's.
    let (mut params, mut cfg) = (params.clone(), cfg.clone());
    experiment::resource_params(&mut params, &mut cfg).with_context(|| format!("-p {label}"))?;
    let (params, cfg) = (&params, &cfg);
    let choice = SpeedChoice {
        model: a.speed.clone(),
        data: a.speed_data.clone(),
        unknown: a.speed_unknown,
    };
    let (speed, note) = experiment::throughput(&choice, a.trace.as_deref(), cluster)?;
    let mut p = registry::build(policy, params)?;
    let notes = experiment::complete_jobs(p.as_ref(), &choice, &mut jobs, cfg.seed);
    if !a.quiet {
        for n in note.iter().chain(&notes) {
            eprintln!("{n}");
        }
        if cfg.io.is_none() && p.capabilities().has(apiary_policy::Capability::Io) {
            eprintln!(
                "note: {label} allocates cache and remote bandwidth: no --io given, so it runs \
                 under --io default (docs/io.md)"
            );
        }
        if cfg.online.is_none()
            && p.capabilities()
                .has(apiary_policy::Capability::OnlineSharing)
        {
            eprintln!(
                "note: {label} shares GPUs with online services: no --online given, so it runs \
                 under --online default (docs/sharing.md)"
            );
        }
        if cfg.cpu.is_none() && p.capabilities().has(apiary_policy::Capability::CpuWorkers) {
            eprintln!(
                "note: {label} allocates CPUs to input pipelines: no --cpu given, so it runs \
                 under --cpu default (docs/io.md)"
            );
        }
    }
    let bar = progress_bar(
        a.quiet,
        jobs.len(),
        label,
        "{prefix} [{bar:30}] {pos}/{len} jobs done, {elapsed_precise} elapsed, ETA {eta_precise}, {msg}",
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(250));
    let t0 = Instant::now();
    if !matches!(a.driver.as_str(), "sim" | "live") {
        bail!("--driver must be sim or live (got '{}')", a.driver);
    }
    let mut out = if a.driver == "live" {
        // Speed models and the per-event quirk read what trace jobs carry (models,
        // batch sizes, per-type speeds) and API submissions do not; restart overheads
        // and slots are the engine's and run over either backend.
        if cfg.io.is_some()
            || cfg.cpu.is_some()
            || cfg.power_limit.is_some()
            || cfg.online.is_some()
        {
            bail!(
                "--driver live runs jobs as their agents report them, and a submission says \
                 nothing of its dataset or its input pipeline, nor sets power limits or \
                 online services' shares: drop --io, --cpu, --power-limit and --online"
            );
        }
        if cfg.failures.is_some() {
            bail!("--driver live does not model failures yet: drop --failures");
        }
        if a.speed != "trace" || cfg.per_event_overhead {
            bail!(
                "--driver live runs jobs at trace speed (a submission carries no model for \
                 a speed table): drop --speed and --per-event-overhead"
            );
        }
        // The same engine over the live service's state machine and simulated agents.
        let live = apiary_server::simulated::LiveBackend::new(cluster, jobs, policy, params, cfg)?;
        let engine = Engine::new(live, Stack::standard(&apiary_sim::DurationModel), cfg)?;
        run_engine(engine, &bar, t0)?
    } else {
        let engine = Engine::sim(
            cluster.clone(),
            jobs,
            p.as_mut(),
            Stack::standard(speed.as_ref()),
            cfg,
        )?;
        run_engine(engine, &bar, t0)?
    };
    bar.finish_and_clear();
    let wall = t0.elapsed().as_secs_f64();
    out.params = params.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.policy = label.to_string();
    if !a.quiet {
        eprintln!(
            "{label}: {} events in {:.3} s ({}), {} policy passes, peak memory {}",
            out.events,
            wall,
            events_rate(out.events, wall),
            out.passes,
            peak_rss_mb().map_or("n/a".into(), |m| format!("{m:.0} MB"))
        );
    }
    Ok(out)
}

/// One run of the engine (over either backend) to its end, with a progress bar.
fn run_engine<B: Backend>(
    engine: Engine<'_, B>,
    bar: &indicatif::ProgressBar,
    t0: Instant,
) -> Result<RunOutcome> {
    let mut last_message = f64::MIN;
    Ok(engine.run(&mut |pr| {
        bar.set_position(pr.finished as u64);
        // The message is text: build it at most a few times a second.
        let t = t0.elapsed().as_secs_f64();
        if t - last_message >= 0.25 {
            last_message = t;
            bar.set_message(format!(
                "{:.0} jobs/s, {}",
                pr.finished as f64 / t,
                events_rate(pr.events, t)
            ));
        }
    })?)
}

fn write_outputs(
    dir: &Path,
    name: &str,
    sum: &Summary,
    o: &RunOutcome,
    record: &Record,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let f = |n: String| -> Result<std::io::BufWriter<std::fs::File>> {
        let p = dir.join(n);
        Ok(std::io::BufWriter::new(
            std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?,
        ))
    };
    apiary_report::write_jobs_csv(o, f(format!("{name}jobs.csv"))?)?;
    apiary_report::write_summary_json(sum, o, Some(record), f(format!("{name}summary.json"))?)?;
    Ok(())
}

/// The cluster, the trace (its name and jobs, read for that cluster) and the
/// simulator options a run's flags give.
fn setup(r: &RunArgs) -> Result<(Cluster, String, Vec<Job>, Config, Record)> {
    let (_, cluster) = experiment::load_cluster(&r.cluster)?;
    let (tname, jobs) = load_trace(
        r.trace.as_deref(),
        &experiment::read_options_for(&read_opts(&r.read)?, &cluster),
        r.quiet,
    )?;
    let cfg = config(r)?;
    let record = record(r, jobs.len())?;
    Ok((cluster, tname, jobs, cfg, record))
}

/// Adds a file's bytes to `digest`, through one small buffer: reading the whole file
/// into memory first touched fresh pages the trace's size (12,000 page faults for the
/// 1 M-job trace, each a few microseconds here).
fn hash_file(digest: &mut sha2::Sha256, path: &Path) -> Result<()> {
    use sha2::Digest;
    use std::io::Read;
    let reading = || format!("reading {}", path.display());
    let mut f = std::fs::File::open(path).with_context(reading)?;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => digest.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(reading),
        }
    }
}

/// The record of a run with these flags, for summary.json and report.html.
fn record(r: &RunArgs, jobs: usize) -> Result<Record> {
    use sha2::Digest;
    let mut digest = sha2::Sha256::new();
    let path = match &r.trace {
        Some(p) if p.is_dir() => {
            // A directory of per-VC files: each file's name, a NUL, then its bytes, in
            // the order the reader takes them.
            for f in apiary_trace::dir_files(p)? {
                let name = f.file_name().unwrap_or_default().to_string_lossy();
                digest.update(name.as_bytes());
                digest.update([0]);
                hash_file(&mut digest, &f)?;
            }
            p.display().to_string()
        }
        Some(p) => {
            hash_file(&mut digest, p)?;
            p.display().to_string()
        }
        None => {
            digest.update(SAMPLE_TRACE_BYTES);
            format!("{SAMPLE_TRACE} (built in)")
        }
    };
    let sha256 = hex(&digest.finalize());
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let path_opt = |v: &Option<PathBuf>| v.as_ref().map_or("-".into(), |p| p.display().to_string());
    let options = [
        ("mode", r.mode.clone()),
        ("restart-overhead", r.restart_overhead.to_string()),
        ("per-event-overhead", r.per_event_overhead.to_string()),
        ("speed", r.speed.clone()),
        ("speed-data", path_opt(&r.speed_data)),
        ("speed-unknown", r.speed_unknown.to_string()),
        ("driver", r.driver.clone()),
        ("percentile", r.percentile.clone()),
        ("carbon", opt(&r.carbon)),
        ("pue", r.pue.to_string()),
        (
            "power-limit",
            r.power_limit.map_or("-".into(), |f| f.to_string()),
        ),
        ("io", opt(&r.io)),
        ("cpu", opt(&r.cpu)),
        ("format", opt(&r.read.format)),
        ("skip-bad-rows", r.read.skip_bad_rows.to_string()),
        ("gavel-throughputs", path_opt(&r.read.gavel_throughputs)),
        (
            "muri-itertime-factor",
            r.read
                .muri_itertime_factor
                .map_or("-".into(), |f| f.to_string()),
        ),
        ("elasticflow-gpu", opt(&r.read.elasticflow_gpu)),
        ("set", r.set.join(" ")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Ok(Record {
        command: std::env::args().collect(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("APIARY_GIT_COMMIT").to_string(),
        date: made_date(),
        trace: TraceRecord { path, sha256, jobs },
        cluster: r.cluster.clone(),
        options,
        seed: r.seed,
    })
}

/// The flags a GPU-sharing run reads.
fn share_args(r: &RunArgs) -> crate::share::ShareArgs<'_> {
    crate::share::ShareArgs {
        trace: r.trace.as_deref(),
        cluster: &r.cluster,
        mode: &r.mode,
        seed: r.seed,
        set: &r.set,
        out: r.out.as_deref(),
        json: r.json,
        quiet: r.quiet,
    }
}

pub(crate) fn simulate(a: SimArgs) -> Result<()> {
    let r = &a.run;
    if apiary_share::is_share_policy(&a.policy) {
        return crate::share::simulate(&a.policy, &share_args(r));
    }
    let settings = settings::parse(&a.policy)?;
    let [setting] = settings.as_slice() else {
        bail!(
            "simulate runs one policy; `apiary compare -p {}` runs several",
            a.policy
        );
    };
    let params = settings::params(setting, &r.set, &settings)?;
    let (cluster, tname, jobs, cfg, record) = setup(r)?;
    if !r.quiet && !r.json {
        println!(
            "trace {tname}: {} jobs; cluster {}: {} GPUs; policy {}",
            jobs.len(),
            cluster.name,
            cluster.total_gpus,
            setting.label
        );
    }
    let out = run_one(setting, &params, r, &cluster, jobs, &cfg)?;
    let sum = Summary::of(&out, percentile(r)?);
    if let Some(dir) = &r.out {
        write_outputs(dir, "", &sum, &out, &record)?;
    }
    if r.json {
        println!("{}", serde_json::to_string_pretty(&sum)?);
    } else {
        print!("{}", apiary_report::table(std::slice::from_ref(&sum)));
        print_rejections(&setting.label, &out);
        print_notes(setting, &params, &sum);
    }
    Ok(())
}

/// Why a run's jobs waited where the numbers alone would puzzle: Gandiva's pending
/// time on a mostly idle cluster comes from an artifact quirk.
fn print_notes(setting: &Setting, params: &apiary_policy::Params, sum: &Summary) {
    if setting.policy == "gandiva"
        && apiary_policy::gandiva::idle_queueing_quirk(params)
        && sum.pending_mean >= 60.0
        && sum.util_mean < 0.5
    {
        println!(
            "{}: {} mean pending time at {:.1} % GPU utilisation: {}",
            setting.label,
            apiary_report::present::duration(sum.pending_mean),
            sum.util_mean * 100.0,
            apiary_policy::gandiva::IDLE_QUEUEING
        );
    }
}

/// Why jobs were rejected, a line per reason (the table counts them).
fn print_rejections(label: &str, out: &RunOutcome) {
    for (reason, n) in apiary_report::html::rejections(out) {
        let jobs = if n == 1 { "job" } else { "jobs" };
        println!("{label}: {n} {jobs} rejected: {reason}");
    }
}

pub(crate) fn compare(a: CompareArgs) -> Result<()> {
    let r = &a.run;
    let names: Vec<&str> = a.policies.split(',').map(str::trim).collect();
    let sharing = names
        .iter()
        .filter(|n| apiary_share::is_share_policy(n))
        .count();
    if sharing > 0 {
        if sharing < names.len() {
            bail!(
                "-p mixes GPU-sharing policies ({}) with training policies: they place \
                 different things; compare each kind on its own",
                apiary_share::POLICIES
                    .names()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        return crate::share::compare(&names, a.seeds.unwrap_or(1), &share_args(r));
    }
    let settings = settings::parse(&a.policies)?;
    let params = settings
        .iter()
        .map(|s| settings::params(s, &r.set, &settings))
        .collect::<Result<Vec<_>>>()?;
    let (cluster, tname, jobs, cfg, record) = setup(r)?;
    // Every setting is built and readied for this trace and cluster before the first
    // runs, so a bad value or a trace a policy cannot read fails at once.
    for (s, p) in settings.iter().zip(&params) {
        let (mut p, mut scratch) = (p.clone(), cfg.clone());
        experiment::resource_params(&mut p, &mut scratch)
            .with_context(|| format!("-p {}", s.label))?;
        let mut policy =
            registry::build(&s.policy, &p).with_context(|| format!("-p {}", s.label))?;
        apiary_sim::backend::preflight(&cluster, &jobs, policy.as_mut())
            .with_context(|| format!("-p {}", s.label))?;
    }
    if let Some(n) = a.seeds {
        if r.driver != "sim" || r.json {
            bail!("--seeds runs the simulator and prints its table: drop --driver and --json");
        }
        return crate::seeds::compare_seeds(r, &settings, &params, n, a.sample);
    }
    let pct = percentile(r)?;
    if !r.quiet && !r.json {
        println!(
            "trace {tname}: {} jobs; cluster {}: {} GPUs",
            jobs.len(),
            cluster.name,
            cluster.total_gpus
        );
    }
    let mut runs = Vec::new();
    for (s, p) in settings.iter().zip(&params) {
        let out = run_one(s, p, r, &cluster, jobs.clone(), &cfg)?;
        let sum = Summary::of(&out, pct);
        runs.push((sum, out));
    }
    let sums: Vec<Summary> = runs.iter().map(|r| r.0.clone()).collect();
    let vcs = vc_rows(&runs, &settings)?;
    let tenants = (!vcs.is_empty()).then(|| apiary_report::vc::vc_html(&vcs));
    if let Some(dir) = &r.out {
        fresh_outputs(dir, &settings)?;
        if !vcs.is_empty() {
            let p = dir.join("vcs.json");
            let m: std::collections::BTreeMap<&str, &Vec<apiary_report::vc::VcRow>> =
                vcs.iter().map(|(n, v)| (n.as_str(), v)).collect();
            std::fs::write(&p, serde_json::to_string_pretty(&m)?)
                .with_context(|| format!("writing {}", p.display()))?;
        }
        for ((s, o), setting) in runs.iter().zip(&settings) {
            write_outputs(dir, &format!("{}-", setting.file_stem()), s, o, &record)?;
        }
        let refs: Vec<(Summary, &RunOutcome)> = runs.iter().map(|(s, o)| (s.clone(), o)).collect();
        let html = apiary_report::html_report(
            &format!("apiary compare: {tname} on {}", cluster.name),
            &refs,
            tenants.as_deref(),
            Some(&record),
        );
        let p = dir.join("report.html");
        std::fs::write(&p, html).with_context(|| format!("writing {}", p.display()))?;
        let charts = dir.join("charts");
        let figs = apiary_report::html::figures(&refs);
        crate::figures::write_all(&charts, figs.all(), a.figures)?;
        if !r.quiet {
            eprintln!(
                "wrote {} and its charts in {}",
                p.display(),
                charts.display()
            );
        }
    }
    if r.json {
        println!("{}", serde_json::to_string_pretty(&sums)?);
    } else {
        print!("{}", apiary_report::table(&sums));
        for h in apiary_report::present::headlines(&sums) {
            println!("{h}");
        }
        let named: Vec<(&str, &RunOutcome)> =
            runs.iter().map(|(s, o)| (s.policy.as_str(), o)).collect();
        for (((sum, o), s), p) in runs.iter().zip(&settings).zip(&params) {
            print_rejections(&s.label, o);
            print_notes(s, p, sum);
        }
        for g in apiary_report::html::identical(&named) {
            let names: Vec<&str> = g.split([',', ' ']).filter(|w| !w.is_empty()).collect();
            // The usual reason, where it is known.
            let why = if names.contains(&"private") && names.contains(&"hived") {
                "; HiveD gives guaranteed jobs only their VC's cells, as private does, and \
                 opportunistic jobs, which borrow idle cells, are not simulated yet"
            } else {
                ""
            };
            println!(
                "{g} gave identical results (every job started and finished at the same \
                 times{why})"
            );
        }
        if !vcs.is_empty() {
            println!();
            if !settings.iter().any(|s| s.policy == "private") {
                println!("(add `private` to --policies to see the sharing anomaly)");
            }
            print!("{}", apiary_report::vc::vc_table(&vcs));
        }
    }
    Ok(())
}

/// Makes `dir` ready for a comparison's files: created if missing, and the files an
/// earlier comparison left there (another policy's `*-jobs.csv`, `*-summary.json`, a
/// stale `vcs.json`) removed, so the folder holds this run's outputs only. Only files
/// apiary writes are touched.
fn fresh_outputs(dir: &Path, settings: &[Setting]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for e in entries {
        let e = e.with_context(|| format!("reading {}", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = name == "vcs.json"
            || name == "report.html"
            || ["-jobs.csv", "-summary.json"].iter().any(|suf| {
                name.strip_suffix(suf).is_some_and(|stem| {
                    let policy = stem.split('@').next().unwrap_or(stem);
                    registry::find(policy).is_some()
                        && !settings.iter().any(|s| s.file_stem() == stem)
                })
            });
        if ours && e.path().is_file() {
            std::fs::remove_file(e.path())
                .with_context(|| format!("removing {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// Per-VC rows of the runs of VC-sharing policies, with the sharing anomaly against the
/// `private` run when there is one.
fn vc_rows(
    runs: &[(Summary, RunOutcome)],
    settings: &[Setting],
) -> Result<Vec<(String, Vec<apiary_report::vc::VcRow>)>> {
    let private = runs
        .iter()
        .zip(settings)
        .find(|(_, s)| s.policy == "private")
        .map(|(r, _)| &r.1);
    let mut out = Vec::new();
    for ((sum, o), s) in runs.iter().zip(settings) {
        if apiary_policy::vc::Sharing::parse(&s.policy).is_none() {
            continue;
        }
        let base = private.filter(|p| !std::ptr::eq(*p, o));
        out.push((sum.policy.clone(), apiary_report::vc::vc_rows(o, base)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_slow_run_s_rate_is_not_zero() {
        // Gandiva on the sample: 6,000 events in 2.5 s used to read "0.00 M events/s".
        assert_eq!(super::events_rate(6000, 2.5), "2.4 k events/s");
        assert_eq!(super::events_rate(164_494, 0.152), "1.08 M events/s");
        assert_eq!(super::events_rate(12, 1.0), "12 events/s");
    }
}
