//! `apiary simulate` and `apiary compare` for the GPU-sharing policies (FGD and its
//! baselines): pod lists and node lists of Alibaba's 2023 trace, `--mode fill:RATIO`
//! (FGD's experiment) or `--mode event` (the trace's own times), FGD's curves in
//! `summary.json` and, for compare, in `report.html` (docs/sharing.md).

use anyhow::{Context, Result, bail};
use apiary_model::share::{GpuNode, Pod};
use apiary_report::html;
use apiary_share::{ByArrived, ByHour, Mode, Outcome, Prepared, Typical, build, workload_typical};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// FGD's share of pods its typical shapes cover, percent.
const POPULARITY: f64 = 95.0;
/// Arrived loads the tables show, percent of the cluster's GPUs.
const LOADS: [usize; 7] = [50, 80, 90, 100, 110, 120, 130];

/// What a GPU-sharing run needs from the command line.
pub(crate) struct ShareArgs<'a> {
    pub(crate) trace: Option<&'a Path>,
    pub(crate) cluster: &'a str,
    pub(crate) mode: &'a str,
    pub(crate) seed: u64,
    pub(crate) set: &'a [String],
    pub(crate) out: Option<&'a Path>,
    pub(crate) json: bool,
    pub(crate) quiet: bool,
}

struct Input {
    trace: String,
    nodes: Vec<GpuNode>,
    pods: Vec<Pod>,
    prep: Prepared,
    typical: Vec<Typical>,
    mode: Mode,
}

fn input(a: &ShareArgs) -> Result<Input> {
    if !a.set.is_empty() {
        bail!(
            "the GPU-sharing policies take no parameters (--set {})",
            a.set.join(" ")
        );
    }
    let Some(trace) = a.trace else {
        bail!(
            "GPU-sharing policies place the pods of an Alibaba v2023 pod list: pass --trace \
             (e.g. ../shared/traces/alibaba/gpu-v2023/openb_pod_list_default.csv)"
        );
    };
    let cluster = PathBuf::from(a.cluster);
    let first = std::fs::read_to_string(&cluster)
        .ok()
        .and_then(|t| t.lines().next().map(str::to_string));
    if !first
        .as_deref()
        .is_some_and(apiary_trace::openb::is_node_list)
    {
        bail!(
            "GPU-sharing policies run on an openb node list (sn,cpu_milli,memory_mib,gpu,model): \
             pass --cluster PATH, e.g. ../shared/traces/alibaba/gpu-v2023/openb_node_list_gpu_node.csv \
             (got '{}')",
            a.cluster
        );
    }
    let Some(mode) = Mode::parse(a.mode) else {
        bail!(
            "--mode for GPU-sharing policies is 'fill:RATIO' (FGD's experiment, 0 < RATIO <= 10) \
             or 'event' (got '{}')",
            a.mode
        );
    };
    let nodes = apiary_trace::openb::read_nodes(&cluster)?;
    let pods = apiary_trace::openb::read_pods(trace)?;
    if pods.is_empty() || nodes.iter().all(|n| n.gpus == 0) {
        bail!("nothing to place: the pod list is empty or the cluster has no GPUs");
    }
    let prep = Prepared::new(&nodes, &pods)?;
    let typical = workload_typical(&prep, POPULARITY);
    Ok(Input {
        trace: trace.display().to_string(),
        nodes,
        pods,
        prep,
        typical,
        mode,
    })
}

/// One policy over one or more seeds.
#[derive(Serialize)]
struct Summary {
    policy: String,
    trace: String,
    mode: String,
    seeds: Vec<u64>,
    total_gpus: u64,
    typical_pods: usize,
    /// Per seed: pods that arrived, and that found a node.
    pods_arrived: Vec<usize>,
    pods_placed: Vec<usize>,
    /// The curves, mean over the seeds at each percent.
    alloc_pct_by_arrived: Vec<Option<f64>>,
    frag_pct_by_arrived: Vec<Option<f64>>,
    frag_ratio_pct_by_arrived: Vec<Option<f64>>,
    /// Allocation at the end of each seed's run, percent.
    alloc_pct_final: Vec<f64>,
    /// Population standard deviation over seeds at each percent, as FGD's summary.
    alloc_pct_std_by_arrived: Vec<Option<f64>>,
    /// With `--mode event`: the same at the end of each hour of the trace, mean over
    /// the seeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    alloc_pct_by_hour: Option<Vec<Option<f64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frag_pct_by_hour: Option<Vec<Option<f64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frag_ratio_pct_by_hour: Option<Vec<Option<f64>>>,
    /// Seconds the runs took (not written: outputs depend on inputs alone).
    #[serde(skip)]
    wall_seconds: f64,
}

fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n;
    (m, v.sqrt())
}

fn curve_mean(curves: &[Vec<Option<f64>>], std: bool) -> Vec<Option<f64>> {
    let len = curves.iter().map(Vec::len).max().unwrap_or(0);
    (0..len)
        .map(|k| {
            let xs: Vec<f64> = curves
                .iter()
                .filter_map(|c| c.get(k).copied().flatten())
                .collect();
            (xs.len() == curves.len() && !xs.is_empty()).then(|| {
                let (m, s) = mean_std(&xs);
                if std {
                    (s * 1000.0).round() / 1000.0
                } else {
                    (m * 100.0).round() / 100.0
                }
            })
        })
        .collect()
}

fn run_policy(
    inp: &Input,
    policy: &str,
    seeds: &[u64],
    mode_text: &str,
) -> Result<(Summary, Outcome)> {
    let t0 = Instant::now();
    let mut curves = (Vec::new(), Vec::new(), Vec::new());
    let mut hours = (Vec::new(), Vec::new(), Vec::new());
    let (mut arrived, mut placed, mut fin) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    for &seed in seeds {
        let p = build(policy, &Default::default())?;
        let o = apiary_share::run(&inp.prep, &inp.pods, inp.typical.clone(), p, inp.mode, seed)?;
        let b = ByArrived::of(&o);
        curves.0.push(b.alloc_pct);
        curves.1.push(b.frag_pct);
        curves.2.push(b.frag_ratio_pct);
        if inp.mode == Mode::Replay {
            let h = ByHour::of(&o);
            let some = |v: Vec<f64>| v.into_iter().map(Some).collect::<Vec<_>>();
            hours.0.push(some(h.alloc_pct));
            hours.1.push(some(h.frag_pct));
            hours.2.push(some(h.frag_ratio_pct));
        }
        arrived.push(o.arrivals.len());
        placed.push(o.placed());
        let total = o.total_gpus as f64 * 1000.0;
        fin.push(
            o.steps
                .last()
                .map_or(0.0, |s| 100.0 * s.used_milli as f64 / total),
        );
        last = Some(o);
    }
    let o = last.context("no seeds")?;
    Ok((
        Summary {
            policy: policy.into(),
            trace: inp.trace.clone(),
            mode: mode_text.into(),
            seeds: seeds.to_vec(),
            total_gpus: o.total_gpus,
            typical_pods: inp.typical.len(),
            pods_arrived: arrived,
            pods_placed: placed,
            alloc_pct_by_arrived: curve_mean(&curves.0, false),
            alloc_pct_std_by_arrived: curve_mean(&curves.0, true),
            frag_pct_by_arrived: curve_mean(&curves.1, false),
            frag_ratio_pct_by_arrived: curve_mean(&curves.2, false),
            alloc_pct_by_hour: (!hours.0.is_empty()).then(|| curve_mean(&hours.0, false)),
            frag_pct_by_hour: (!hours.1.is_empty()).then(|| curve_mean(&hours.1, false)),
            frag_ratio_pct_by_hour: (!hours.2.is_empty()).then(|| curve_mean(&hours.2, false)),
            alloc_pct_final: fin,
            wall_seconds: t0.elapsed().as_secs_f64(),
        },
        o,
    ))
}

fn at(c: &[Option<f64>], k: usize) -> String {
    c.get(k)
        .copied()
        .flatten()
        .map_or("-".into(), |v| format!("{v:.2}"))
}

/// Mean and peak of an hourly curve.
fn mean_peak(c: &Option<Vec<Option<f64>>>) -> (f64, f64) {
    let v: Vec<f64> = c.iter().flatten().flatten().copied().collect();
    let n = v.len().max(1) as f64;
    (
        v.iter().sum::<f64>() / n,
        v.iter().copied().fold(0.0, f64::max),
    )
}

/// `--mode event`: the cluster over the trace's hours.
fn event_table(sums: &[Summary]) -> String {
    let mut t = format!(
        "{:<16}{:>14}{:>14}{:>14}{:>18}{:>18}\n",
        "over the hours",
        "alloc % mean",
        "alloc % peak",
        "frag % mean",
        "frag/idle % mean",
        "placed/arrived"
    );
    for s in sums {
        let (am, ap) = mean_peak(&s.alloc_pct_by_hour);
        let (fm, _) = mean_peak(&s.frag_pct_by_hour);
        let (rm, _) = mean_peak(&s.frag_ratio_pct_by_hour);
        let _ = writeln!(
            t,
            "{:<16}{am:>14.2}{ap:>14.2}{fm:>14.2}{rm:>18.2}{:>18}",
            s.policy,
            format!("{}/{}", s.pods_placed[0], s.pods_arrived[0])
        );
    }
    t
}

fn table(sums: &[Summary]) -> String {
    if sums.first().is_some_and(|s| s.alloc_pct_by_hour.is_some()) {
        return event_table(sums);
    }
    let mut t = String::new();
    let _ = write!(t, "{:<16}", "allocation %");
    for l in LOADS {
        let _ = write!(t, "{:>9}", format!("@{l}%"));
    }
    let _ = writeln!(t, "{:>12}{:>15}", "frag %@80", "frag/idle %@80");
    for s in sums {
        let _ = write!(t, "{:<16}", s.policy);
        for l in LOADS {
            let _ = write!(t, "{:>9}", at(&s.alloc_pct_by_arrived, l));
        }
        let _ = writeln!(
            t,
            "{:>12}{:>15}",
            at(&s.frag_pct_by_arrived, 80),
            at(&s.frag_ratio_pct_by_arrived, 80)
        );
    }
    t
}

/// Where each pod went, one row per arrival of the last seed's run.
fn pods_csv(inp: &Input, o: &Outcome) -> String {
    let mut s = String::from("pod,cpu_milli,memory_mib,num_gpu,gpu_milli,node,gpus\n");
    for a in &o.arrivals {
        let p = &inp.pods[a.pod];
        let (node, gpus) = match &a.placed {
            Some(pl) => (
                inp.nodes[pl.node as usize].name.to_string(),
                pl.pick
                    .gpus()
                    .iter()
                    .map(|g| format!("{g}:{}", p.gpu_milli))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            None => (String::new(), String::new()),
        };
        let _ = writeln!(
            s,
            "{},{},{},{},{},{node},{gpus}",
            p.name, p.cpu_milli, p.mem_mib, p.num_gpu, p.gpu_milli
        );
    }
    s
}

fn write_run(dir: &Path, prefix: &str, inp: &Input, sum: &Summary, o: &Outcome) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(
        dir.join(format!("{prefix}summary.json")),
        serde_json::to_string_pretty(sum)? + "\n",
    )?;
    std::fs::write(dir.join(format!("{prefix}pods.csv")), pods_csv(inp, o))?;
    Ok(())
}

/// `apiary simulate -p POLICY` for a GPU-sharing policy.
pub(crate) fn simulate(policy: &str, a: &ShareArgs) -> Result<()> {
    let inp = input(a)?;
    let (sum, o) = run_policy(&inp, policy, &[a.seed], a.mode)?;
    if let Some(dir) = a.out {
        write_run(dir, "", &inp, &sum, &o)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&sum)?);
        return Ok(());
    }
    if !a.quiet {
        println!(
            "trace {}: {} pods ({} typical shapes); cluster {}: {} nodes, {} GPUs; policy {policy}; mode {}",
            inp.trace,
            inp.pods.len(),
            inp.typical.len(),
            a.cluster,
            inp.nodes.len(),
            sum.total_gpus,
            a.mode
        );
    }
    print!("{}", table(std::slice::from_ref(&sum)));
    println!(
        "{} of {} arrivals placed; final allocation {:.2} %; {:.2} s",
        sum.pods_placed[0], sum.pods_arrived[0], sum.alloc_pct_final[0], sum.wall_seconds
    );
    Ok(())
}

/// `apiary compare -p P1,P2,...` for GPU-sharing policies, over `seeds` seeds from `--seed`.
pub(crate) fn compare(policies: &[&str], seeds: u64, a: &ShareArgs) -> Result<()> {
    let inp = input(a)?;
    let seeds: Vec<u64> = (a.seed..a.seed + seeds.max(1)).collect();
    let mut sums = Vec::new();
    for p in policies {
        let (sum, o) = run_policy(&inp, p, &seeds, a.mode).with_context(|| format!("-p {p}"))?;
        if let Some(dir) = a.out {
            write_run(dir, &format!("{p}."), &inp, &sum, &o)?;
        }
        sums.push(sum);
    }
    let text = table(&sums);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&sums)?);
    } else {
        if !a.quiet {
            println!(
                "trace {}: {} pods; cluster {}: {} GPUs; mode {}; seeds {}..={} (means)",
                inp.trace,
                inp.pods.len(),
                a.cluster,
                sums[0].total_gpus,
                a.mode,
                seeds[0],
                seeds[seeds.len() - 1]
            );
        }
        print!("{text}");
    }
    if let Some(dir) = a.out {
        std::fs::write(dir.join("report.html"), report(&inp, a, &sums, &text))?;
        if !a.quiet && !a.json {
            println!("wrote {}", dir.join("report.html").display());
        }
    }
    Ok(())
}

fn report(inp: &Input, a: &ShareArgs, sums: &[Summary], text: &str) -> String {
    // Each policy's curve, indexed by load percent or by hour.
    let series = |f: fn(&Summary) -> &[Option<f64>]| -> Vec<(String, Vec<(f64, f64)>)> {
        sums.iter()
            .map(|s| {
                let pts = f(s)
                    .iter()
                    .enumerate()
                    .filter_map(|(k, v)| v.map(|v| (k as f64, v)))
                    .collect();
                (s.policy.clone(), pts)
            })
            .collect()
    };
    let name = |p: &str| {
        Path::new(p)
            .file_name()
            .map_or_else(|| p.to_string(), |f| f.to_string_lossy().into_owned())
    };
    let mut o = html::page_start(
        &format!("GPU sharing: {} on {}", name(&inp.trace), name(a.cluster)),
        &format!(
            "mode {}, seeds {:?}, {} typical pod shapes (95 % of pods)\n\n{text}",
            a.mode,
            sums[0].seeds,
            inp.typical.len()
        ),
    );
    o.push_str(&html::chart(
        "GPU allocation by arrived load (FGD Fig. 9(a))",
        "arrived GPU request, % of the cluster's GPUs",
        "GPUs allocated, %",
        false,
        &series(|s| &s.alloc_pct_by_arrived),
    ));
    o.push_str(&html::chart(
        "Fragmented GPUs, % of all GPUs (FGD Fig. 7(b))",
        "arrived GPU request, % of the cluster's GPUs",
        "fragmented, % of all GPUs",
        false,
        &series(|s| &s.frag_pct_by_arrived),
    ));
    o.push_str(&html::chart(
        "Fragmented GPUs, % of idle GPUs (FGD Fig. 7(a))",
        "arrived GPU request, % of the cluster's GPUs",
        "fragmented, % of idle GPUs",
        false,
        &series(|s| &s.frag_ratio_pct_by_arrived),
    ));
    if sums[0].alloc_pct_by_hour.is_some() {
        o.push_str(&html::chart(
            "GPU allocation over the trace (--mode event)",
            "hours from the trace's start",
            "GPUs allocated, %",
            false,
            &series(|s| s.alloc_pct_by_hour.as_deref().unwrap_or(&[])),
        ));
        o.push_str(&html::chart(
            "Fragmented GPUs over the trace, % of all GPUs (--mode event)",
            "hours from the trace's start",
            "fragmented, % of all GPUs",
            false,
            &series(|s| s.frag_pct_by_hour.as_deref().unwrap_or(&[])),
        ));
    }
    o.push_str("</body></html>\n");
    o
}
