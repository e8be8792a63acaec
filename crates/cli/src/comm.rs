//! `apiary comm`: topology-optimal collective planning (ForestColl) from the command
//! line: the optimum and its bottleneck, closed-form schedules beside it, presets.

use anyhow::{Context, Result, bail};
use apiary_comm::closed::Cost;
use apiary_comm::presets::{FABRICS, PRESETS};
use apiary_comm::{Bandwidths, Collective, Topology, load};
use clap::{Args, Subcommand};
use serde_json::json;

#[derive(Subcommand)]
pub enum CommCmd {
    /// The optimal schedule's bandwidth for a collective on a topology: x*, U, k, the
    /// bottleneck cut, and the time for a message size.
    Plan(PlanArgs),
    /// Ring, double binary tree and hierarchical allreduce (closed forms) beside the
    /// optimum.
    Compare(TopoArgs),
    /// The optimal fluid all-to-all (max concurrent multi-commodity flow LP); --size is
    /// the data each rank sends to each other rank.
    Alltoall(TopoArgs),
    /// List the built-in topologies.
    Presets,
    /// Time the planner on the reference topologies (median of repeated runs).
    Bench {
        /// One JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Print a topology (preset or file) in the file format, to start a file from.
    Export {
        /// Preset name or topology file.
        #[arg(long, short)]
        topology: String,
    },
}

#[derive(Args)]
pub struct TopoArgs {
    /// Preset name (see `apiary comm presets`) or topology file (.json / .toml).
    #[arg(
        long,
        short,
        required_unless_present = "cluster",
        conflicts_with = "cluster"
    )]
    topology: Option<String>,
    /// Instead of --topology: a cluster (preset or file, as `apiary simulate -c`) and
    /// --placement on it; the topology is the one the placement induces.
    #[arg(long, requires = "placement")]
    cluster: Option<String>,
    /// GPUs per node for --cluster: NODE:GPUS,... with nodes by index or name, e.g.
    /// 0:8,1:8,40:4.
    #[arg(long, requires = "cluster")]
    placement: Option<String>,
    /// Message size: the buffer nccl-tests names (per-rank buffer for allreduce, total
    /// output for allgather), e.g. 1GB, 256MiB, 4096.
    #[arg(long, short, default_value = "1GB")]
    size: String,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct PlanArgs {
    #[command(flatten)]
    topo: TopoArgs,
    /// allgather, reduce-scatter or allreduce.
    #[arg(long, short, default_value = "allreduce")]
    collective: String,
    /// Build the tree schedule with this many units per root (e.g. 1: one tree per GPU,
    /// few threadblocks) instead of the optimal k; reports the bandwidth it reaches.
    #[arg(long)]
    k: Option<u64>,
    /// Build the tree schedule and write it as MSCCL XML (for MSCCL_ALGO_DIR).
    #[arg(long, value_name = "FILE")]
    emit_msccl: Option<std::path::PathBuf>,
    /// Write the ring as NCCL graph XML (for NCCL_GRAPH_FILE), where a ring reaches the
    /// optimum (one box of GPUs on a switch); elsewhere, an error saying why.
    #[arg(long, value_name = "FILE")]
    emit_nccl_graph: Option<std::path::PathBuf>,
    /// Most channels the MSCCL algorithm may use (1..=32); the NCCL graph's channels.
    #[arg(long, default_value_t = 32)]
    channels: u32,
}

/// Bytes in a size such as `1GB`, `256MiB`, `4096`.
fn parse_size(s: &str) -> Result<f64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .with_context(|| format!("size '{s}': expected a number with an optional unit"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        u => bail!("size '{s}': unknown unit '{u}' (B, KB, MB, GB, KiB, MiB, GiB)"),
    };
    if !(v.is_finite() && v > 0.0) {
        bail!("size '{s}' must be positive");
    }
    Ok(v * mult)
}

fn topology(spec: &str) -> Result<Topology> {
    Ok(load(spec)?)
}

/// The topology of --topology, or of --placement on --cluster.
fn topo_of(a: &TopoArgs) -> Result<Topology> {
    match (&a.topology, &a.cluster, &a.placement) {
        (Some(t), _, _) => topology(t),
        (None, Some(c), Some(p)) => {
            let (_, cluster) = apiary_sim::experiment::load_cluster(c)?;
            let parts = apiary_comm::cluster::parse_placement(&cluster, p)?;
            Ok(apiary_comm::placement_topology(&cluster, &parts)?)
        }
        _ => bail!("give --topology, or --cluster with --placement"),
    }
}

fn summary_line(t: &Topology) -> String {
    let switches = t.nodes().len() - t.n();
    format!(
        "{}: {} compute nodes, {} switches, {} directed links",
        t.name(),
        t.n(),
        switches,
        t.edges().len()
    )
}

fn human_time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// `apiary comm plan`.
pub fn plan(a: &PlanArgs) -> Result<()> {
    let coll = Collective::parse(&a.collective).with_context(|| {
        format!(
            "unknown collective '{}' (allgather, reduce-scatter, allreduce)",
            a.collective
        )
    })?;
    let bytes = parse_size(&a.topo.size)?;
    let t = topo_of(&a.topo)?;
    let bw = Bandwidths::of(&t);
    let n = t.n();
    let spg = |c| bw.seconds_per_gb(c, n).to_f64();
    let algbw = 1.0 / spg(coll);
    let seconds = bytes / 1e9 * spg(coll);
    let opt = match coll {
        Collective::ReduceScatter => &bw.reduce_scatter,
        _ => &bw.allgather,
    };
    // Trees are built when asked for (a fixed k or an MSCCL file): reduce-scatter's are
    // the reversed topology's allgather trees.
    let sched = if a.k.is_some() || a.emit_msccl.is_some() {
        let topo = if coll == Collective::ReduceScatter {
            t.reversed()
        } else {
            t.clone()
        };
        let s = apiary_comm::plan(&topo, a.k)?;
        apiary_comm::validate(&topo, &s)
            .map_err(|e| anyhow::anyhow!("internal error: invalid schedule: {e}"))?;
        Some(s)
    } else {
        None
    };
    if let (Some(path), Some(s)) = (&a.emit_msccl, &sched) {
        let name = format!("apiary-{}-{}", coll.msccl_name(), t.name());
        let algo = apiary_comm::msccl::emit(&t, s, coll, &name, a.channels)?;
        algo.execute()
            .map_err(|e| anyhow::anyhow!("internal error: the emitted algorithm fails: {e}"))?;
        std::fs::write(path, algo.to_xml())
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!(
            "wrote {} ({} ranks, {} channels, {} chunks per loop)",
            path.display(),
            algo.gpus.len(),
            algo.nchannels,
            algo.nchunksperloop
        );
    }
    if let Some(path) = &a.emit_nccl_graph {
        let xml = apiary_comm::nccl::ring_graph(&t, a.channels)?;
        std::fs::write(path, xml).with_context(|| format!("writing {}", path.display()))?;
        eprintln!(
            "wrote {} (ring over {} GPUs, {} channels)",
            path.display(),
            n,
            a.channels
        );
    }
    // With a fixed k the schedule's bandwidth is what the trees reach.
    let (algbw, seconds) = match (&sched, a.k) {
        (Some(s), Some(_)) => {
            let per = s.x.to_f64() / n as f64;
            let per_gb = if coll == Collective::Allreduce {
                2.0 * per
            } else {
                per
            };
            (1.0 / per_gb, bytes / 1e9 * per_gb)
        }
        _ => (algbw, seconds),
    };
    let trees = sched.as_ref().map(|s| {
        json!({
            "k": s.k,
            "u": s.u,
            "x": s.x,
            "trees": s.trees.len(),
            "max_height": s.trees.iter().map(|t| t.height()).max().unwrap_or(0),
        })
    });
    if a.topo.json {
        let v = json!({
            "topology": t.name(),
            "compute_nodes": n,
            "collective": coll,
            "x_star": bw.allgather.x_star,
            "x_star_reduce_scatter": bw.reduce_scatter.x_star,
            "algbw_gbps": {
                "allgather": 1.0 / spg(Collective::Allgather),
                "reduce_scatter": 1.0 / spg(Collective::ReduceScatter),
                "allreduce": 1.0 / spg(Collective::Allreduce),
            },
            "busbw_gbps": algbw * coll.bus_factor(n),
            "k": opt.k,
            "u": opt.u,
            "bottleneck": {
                "nodes": opt.cut.iter().map(|&i| t.nodes()[i as usize].name.as_str()).collect::<Vec<_>>(),
                "compute_nodes": opt.cut_compute,
                "bandwidth_gbps": opt.cut_bandwidth.to_f64(),
            },
            "size_bytes": bytes,
            "seconds": seconds,
            "newton_steps": opt.iterations,
            "maxflows": opt.maxflows,
            "schedule": trees,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let rs = if t.is_symmetric() {
        "the same for reduce-scatter (symmetric links)".to_string()
    } else {
        format!("reduce-scatter {}", bw.reduce_scatter.x_star)
    };
    println!("topology     {}", summary_line(&t));
    println!(
        "x*           {} (≈ {:.6}) s per GB of shard; {rs}",
        bw.allgather.x_star,
        bw.allgather.x_star.to_f64()
    );
    println!(
        "algbw        allgather {:.1} GB/s, reduce-scatter {:.1} GB/s, allreduce {:.1} GB/s",
        1.0 / spg(Collective::Allgather),
        1.0 / spg(Collective::ReduceScatter),
        1.0 / spg(Collective::Allreduce)
    );
    println!(
        "{:<12} algbw {:.1} GB/s, busbw {:.1} GB/s",
        a.collective,
        algbw,
        algbw * coll.bus_factor(n)
    );
    println!(
        "trees        k = {} per root, U = {} (edge e carries at most U·b(e) of the k units)",
        opt.k, opt.u
    );
    if let Some(s) = &sched {
        println!(
            "schedule     {} trees, k = {}, U = {}, height ≤ {}, {:.1} % of the optimum{}",
            s.trees.len(),
            s.k,
            s.u,
            s.trees.iter().map(|t| t.height()).max().unwrap_or(0),
            100.0 * opt.x_star.to_f64() / s.x.to_f64(),
            if a.k.is_some() { " (fixed k)" } else { "" }
        );
    }
    println!("bottleneck   {}", opt.describe_cut(&t));
    println!(
        "time         {} for {} bytes (bandwidth bound; no latency term)",
        human_time(seconds),
        bytes
    );
    println!(
        "solved in    {} Newton step(s), {} max-flows",
        opt.iterations, opt.maxflows
    );
    Ok(())
}

/// `apiary comm compare`.
pub fn compare(a: &TopoArgs) -> Result<()> {
    let bytes = parse_size(&a.size)?;
    let t = topo_of(a)?;
    let bw = Bandwidths::of(&t);
    let n = t.n();
    let opt_algbw = 1.0 / bw.seconds_per_gb(Collective::Allreduce, n).to_f64();
    let gb = bytes / 1e9;
    let mut rows: Vec<(String, f64, f64)> = vec![(
        "optimum (ForestColl RS+AG)".to_string(),
        opt_algbw,
        gb / opt_algbw,
    )];
    let closed: Vec<Cost> = t.shape().map(|s| s.all()).unwrap_or_default();
    for c in &closed {
        rows.push((c.schedule.to_string(), c.algbw, c.seconds(gb)));
    }
    let factor = Collective::Allreduce.bus_factor(n);
    if a.json {
        let v = json!({
            "topology": t.name(),
            "compute_nodes": n,
            "shape": t.shape(),
            "size_bytes": bytes,
            "allreduce": rows.iter().map(|(name, algbw, s)| json!({
                "schedule": name, "algbw_gbps": algbw, "busbw_gbps": algbw * factor, "seconds": s,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("topology  {}", summary_line(&t));
    println!("allreduce of {bytes} bytes per rank\n");
    println!(
        "{:<28} {:>12} {:>12} {:>12} {:>8}",
        "schedule", "algbw GB/s", "busbw GB/s", "time", "vs opt"
    );
    for (name, algbw, s) in &rows {
        println!(
            "{:<28} {:>12.1} {:>12.1} {:>12} {:>7.0}%",
            name,
            algbw,
            algbw * factor,
            human_time(*s),
            100.0 * algbw / opt_algbw
        );
    }
    if closed.is_empty() {
        println!(
            "\n(closed forms need a box shape: use a box preset or add a `shape` table to the file)"
        );
    } else {
        println!(
            "\nThe optimum is a bandwidth bound (no latency term); closed forms add NCCL's Simple-protocol latencies."
        );
    }
    Ok(())
}

/// `apiary comm presets`.
pub fn presets() {
    for p in PRESETS {
        println!("{:<26} {}", p.syntax, p.about);
    }
    println!("\nFABRIC: {FABRICS}");
}

/// `apiary comm export`.
pub fn export(spec: &str) -> Result<()> {
    print!("{}", topology(spec)?.to_json());
    Ok(())
}

/// One timed planner case.
#[derive(serde::Serialize)]
pub struct CommFigure {
    /// Topology preset.
    pub topology: String,
    /// What was timed.
    pub what: &'static str,
    /// Median wall time, milliseconds.
    pub median_ms: f64,
    /// Runs timed.
    pub runs: u32,
}

fn median_ms(mut f: impl FnMut()) -> (f64, u32) {
    // Repeat until about half a second has passed (at least 5 runs), report the median.
    let mut times = Vec::new();
    let start = std::time::Instant::now();
    while times.len() < 5 || (start.elapsed().as_secs_f64() < 0.5 && times.len() < 10_000) {
        let t = std::time::Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times.len() as u32)
}

/// `apiary comm bench`.
pub fn bench(json: bool) -> Result<()> {
    let mut figs = Vec::new();
    for spec in [
        "dgx-a100:2",
        "dgx-h100:2",
        "mi250:1",
        "mi250:2",
        "dgx-h100:8:leaf2",
    ] {
        let t = topology(spec)?;
        let (ms, runs) = median_ms(|| {
            std::hint::black_box(apiary_comm::optimum(&t));
        });
        figs.push(CommFigure {
            topology: spec.to_string(),
            what: "x*",
            median_ms: ms,
            runs,
        });
    }
    for spec in ["dgx-a100:2", "dgx-h100:2", "mi250:1", "mi250:2"] {
        let t = topology(spec)?;
        let trees = apiary_comm::plan(&t, None)?.trees.len();
        let (ms, runs) = median_ms(|| {
            std::hint::black_box(apiary_comm::plan(&t, None).expect("planned above"));
        });
        figs.push(CommFigure {
            topology: spec.to_string(),
            what: "x* + trees",
            median_ms: ms,
            runs,
        });
        let _ = trees;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&figs)?);
        return Ok(());
    }
    println!(
        "{:<20} {:<16} {:>12} {:>8}",
        "topology", "what", "median ms", "runs"
    );
    for f in &figs {
        println!(
            "{:<20} {:<16} {:>12.3} {:>8}",
            f.topology, f.what, f.median_ms, f.runs
        );
    }
    Ok(())
}

/// `apiary comm alltoall`.
pub fn alltoall(a: &TopoArgs) -> Result<()> {
    let m = parse_size(&a.size)?;
    let t = topo_of(a)?;
    let r = apiary_comm::alltoall::alltoall(&t)?;
    let n = t.n() as f64;
    let seconds = m / 1e9 * r.tau;
    // nccl-tests: the per-rank buffer holds one block per rank.
    let algbw = n * m / 1e9 / seconds;
    let busbw = algbw * (n - 1.0) / n;
    let x = apiary_comm::optimum(&t).x_star.to_f64();
    if a.json {
        let v = json!({
            "topology": t.name(),
            "compute_nodes": t.n(),
            "tau": r.tau,
            "pair_rate_gbps": r.pair_rate_gbps,
            "per_pair_bytes": m,
            "seconds": seconds,
            "algbw_gbps": algbw,
            "busbw_gbps": busbw,
            "allgather_seconds_same_output": m / 1e9 * x,
            "lp_variables": r.variables,
            "lp_constraints": r.constraints,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("topology     {}", summary_line(&t));
    println!(
        "tau          {:.6} s per GB sent to each peer ({:.2} GB/s per pair at once)",
        r.tau, r.pair_rate_gbps
    );
    println!(
        "time         {} for {m} bytes to each of {} peers (algbw {algbw:.1} GB/s, busbw {busbw:.1} GB/s)",
        human_time(seconds),
        t.n() - 1
    );
    println!(
        "allgather    {} for the same output per rank (tree optimum x*; a broadcast moves less data)",
        human_time(m / 1e9 * x)
    );
    println!(
        "solved       LP with {} variables, {} constraints (good_lp + microlp)",
        r.variables, r.constraints
    );
    Ok(())
}
