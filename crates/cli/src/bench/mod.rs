//! `apiary bench`: the performance figures the README quotes, measured the same way every
//! time. Each simulation case runs `apiary simulate` in a child process, so its peak
//! memory is its own, and the child's timing line is parsed for events, wall time and
//! peak memory. Trace reading and the live service are measured in-process. Every run
//! is kept in a history and printed beside the last one.

mod cases;
mod check;
mod extender;
#[cfg(feature = "etcd")]
mod failover;
mod history;
mod live;
mod parse;
mod targets;

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// One measured run.
#[derive(Debug, serde::Serialize)]
pub struct Figure {
    /// Case name.
    pub case: String,
    /// The command that reproduces it.
    pub command: String,
    /// Simulated events.
    pub events: u64,
    /// Wall time of the simulation, seconds.
    pub wall_s: f64,
    /// Events per second.
    pub events_per_s: f64,
    /// Peak resident memory of the child, MB.
    pub peak_mb: f64,
}

struct Case {
    name: String,
    args: Vec<String>,
}

fn parse_timing(stderr: &str) -> Option<(u64, f64, f64)> {
    // "<policy>: N events in X s (Y M events/s), P policy passes, peak memory Z MB"
    let line = stderr.lines().rev().find(|l| l.contains(" events in "))?;
    let (_, rest) = line.split_once(": ")?;
    let mut w = rest.split_whitespace();
    let events = w.next()?.parse().ok()?;
    let wall = rest
        .split_once(" events in ")?
        .1
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let peak = rest
        .split_once("peak memory ")
        .and_then(|(_, m)| m.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN);
    Some((events, wall, peak))
}

fn run_case(exe: &Path, c: &Case) -> Result<Figure> {
    let out = Command::new(exe)
        .args(&c.args)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("case {} failed: {}", c.name, stderr.trim());
    }
    let (events, wall_s, peak_mb) = parse_timing(&stderr)
        .with_context(|| format!("case {}: no timing line in: {}", c.name, stderr.trim()))?;
    Ok(Figure {
        case: c.name.clone(),
        command: format!("apiary {}", c.args.join(" ")),
        events,
        wall_s,
        events_per_s: events as f64 / wall_s.max(1e-9),
        peak_mb,
    })
}

/// Runs the benchmark set, then the HiveD decision benchmark (`apiary hived bench`). `shared` is the traces directory (`../shared/traces`); cases
/// that need it are skipped, with a note, when it is absent. `full` adds the 1 M-job
/// synthetic runs, generated into `work`.
pub fn bench(
    shared: Option<&Path>,
    full: bool,
    work: &Path,
    json: bool,
    etcd: Option<&str>,
    check: bool,
) -> Result<()> {
    let exe = std::env::current_exe().context("finding the apiary binary")?;
    let cases = cases::all(shared, full, work, &exe)?;
    let previous = history::last(work);
    let mut figs = Vec::new();
    for c in &cases {
        if !json {
            eprintln!("running: {}", c.name);
        }
        figs.push(run_case(&exe, c)?);
    }
    if !json {
        eprintln!("running: hived decision, 10,000 GPUs, 50 VCs");
    }
    let decision = hived_decision(&exe)?;
    // Reading is timed before the live figures: a process that has run a threaded
    // server allocates differently, and reading here should be measured as the CLI runs it.
    let synth = work.join("synth-1m.csv");
    let mut reads = Vec::new();
    for (name, path) in parse::cases(shared, full.then_some(synth.as_path())) {
        if !json {
            eprintln!("reading: {name}");
        }
        reads.push(parse::measure(&name, &path, 5)?);
    }
    if !json {
        eprintln!("running: live service (scheduling pass, durable submissions)");
    }
    let lf = live::live(work, etcd)?;
    if !json {
        eprintln!("running: Kubernetes scheduler extender, 5,000 nodes");
    }
    let ef = extender::extender(2_000)?;
    if !json {
        eprintln!("running: state rebuilt at start, 10,000 nodes, 100,000 jobs");
    }
    let (rb_nodes, rb_jobs) = (10_000, 100_000);
    let rebuild_redb_s = live::rebuild(work, rb_nodes, rb_jobs, None)?;
    let rebuild_etcd_s = etcd
        .map(|url| live::rebuild(work, rb_nodes, rb_jobs, Some(url)))
        .transpose()?;
    let failover_s: Option<Vec<f64>> = match etcd {
        #[cfg(feature = "etcd")]
        Some(url) => {
            if !json {
                eprintln!("running: fail-over between two servers on etcd, 10 rounds");
            }
            let mut t = failover::failover(&exe, work, url, 10)?;
            t.sort_by(f64::total_cmp);
            Some(t)
        }
        _ => None,
    };
    let targets = targets::targets(&figs, &reads, &lf);
    let record = serde_json::json!({
        "machine": check::machine(),
        "targets": targets,
        "runs": figs,
        "parse": reads,
        "hived_decision": decision,
        "live": lf,
        "extender": ef,
        "failover_s": failover_s,
        "rebuild": {"nodes": rb_nodes, "jobs": rb_jobs, "redb_s": rebuild_redb_s, "etcd_s": rebuild_etcd_s},
    });
    let (regressions, baseline) = check::regressions(&record, &history::all(work));
    history::append(work, record.clone())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&record)?);
        return checked(check, &regressions, baseline);
    }
    print_figures(previous.as_ref(), &figs, &reads, &decision, &lf);
    println!(
        "extender (filter over {} nodes, then bind), {} pods: filter p50 {:.0} us, p99 {:.0} us; {:.0} pods/s",
        ef.nodes, ef.pods, ef.filter_p50_us, ef.filter_p99_us, ef.pods_per_s
    );
    if let Some(t) = &failover_s {
        println!(
            "fail-over on etcd, leader SIGKILLed, 2 s lease, {} rounds: p50 {:.2} s, max {:.2} s",
            t.len(),
            t[t.len() / 2],
            t[t.len() - 1]
        );
    }
    println!(
        "state rebuilt at start, {rb_nodes} nodes, {rb_jobs} jobs: redb {rebuild_redb_s:.2} s{}",
        rebuild_etcd_s.map_or(String::new(), |s| format!(", etcd {s:.2} s"))
    );
    targets::print(&targets);
    checked(check, &regressions, baseline)
}

/// With `--check`: an error listing the figures that regressed, if any.
fn checked(check: bool, regressions: &[check::Regression], baseline: usize) -> Result<()> {
    if !check {
        return Ok(());
    }
    if baseline == 0 {
        eprintln!("check: no earlier run on this machine to compare with");
        return Ok(());
    }
    if regressions.is_empty() {
        eprintln!(
            "check: no figure more than {:.0} % worse than the median of the last {baseline} runs on this machine",
            check::TOLERANCE * 100.0
        );
        return Ok(());
    }
    let lines: Vec<String> = regressions
        .iter()
        .map(|r| {
            format!(
                "  {}: {:.4} against a median of {:.4}, {:.0} % worse",
                r.name, r.now, r.median, r.worse_pct
            )
        })
        .collect();
    bail!(
        "{} figures more than {:.0} % worse than the median of the last {baseline} runs on this machine:\n{}",
        regressions.len(),
        check::TOLERANCE * 100.0,
        lines.join("\n")
    )
}

/// One HiveD decision's latency, from `apiary hived bench --json`.
fn hived_decision(exe: &Path) -> Result<serde_json::Value> {
    let out = Command::new(exe)
        .args(["hived", "bench", "--json"])
        .output()
        .context("running apiary hived bench")?;
    if !out.status.success() {
        bail!(
            "apiary hived bench failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let decision: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading apiary hived bench --json")?;
    Ok(decision)
}

/// The table of figures, each beside the last run's.
fn print_figures(
    last: Option<&serde_json::Value>,
    figs: &[Figure],
    reads: &[parse::ParseFigure],
    decision: &serde_json::Value,
    lf: &live::LiveFigures,
) {
    if let Some(l) = last {
        println!(
            "(vs last: the change in wall time since the run of {} at unix time {})",
            l["commit"].as_str().unwrap_or("an unknown commit"),
            l["unix_time"]
        );
    }
    println!(
        "{:<50} {:>10} {:>9} {:>12} {:>9} {:>8}",
        "case", "events", "wall s", "M events/s", "peak MB", "vs last"
    );
    for f in figs {
        println!(
            "{:<50} {:>10} {:>9.3} {:>12.2} {:>9.0} {:>8}",
            f.case,
            f.events,
            f.wall_s,
            f.events_per_s / 1e6,
            f.peak_mb,
            history::change(f.wall_s, history::figure(last, "runs", &f.case, "wall_s"))
        );
    }
    println!(
        "{:<50} {:>10} {:>9} {:>12} {:>9} {:>9} {:>8}",
        "trace read (best of 5)", "jobs", "wall s", "MB/s", "1 thread", "limit", "vs last"
    );
    for r in reads {
        println!(
            "{:<50} {:>10} {:>9.4} {:>12.0} {:>9.0} {:>9.0} {:>8}",
            r.case,
            r.jobs,
            r.best_s,
            r.mb_per_s,
            r.one_thread_mb_per_s,
            r.scan_mb_per_s,
            history::change(r.best_s, history::figure(last, "parse", &r.case, "best_s"))
        );
    }
    let us = |k: &str| decision[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "hived decision (apiary hived bench): 10,000 GPUs, 50 VCs: median {:.1} us, p99 {:.1} us",
        us("median_us"),
        us("p99_us")
    );
    println!(
        "live scheduling pass, Tiresias, {} GPUs, {} queued: p50 {:.0} us, p99 {:.0} us",
        lf.pass_gpus, lf.pass_queued, lf.pass_p50_us, lf.pass_p99_us
    );
    for (packing, p50, p99, queued) in &lf.share_pass {
        println!(
            "live pass placing GPU-sharing jobs ({packing}), {} GPUs, {queued} queued: p50 {p50:.0} us, p99 {p99:.0} us",
            lf.pass_gpus
        );
    }
    println!(
        "live durable submissions over HTTP (redb, {} clients): {:.0} jobs/s",
        lf.submit_clients, lf.submit_per_s
    );
    if let Some(n) = lf.submit_etcd_per_s {
        println!(
            "live durable submissions over HTTP (etcd, {} clients): {n:.0} jobs/s",
            lf.submit_clients
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parses_the_timing_line() {
        let e = "note: x\ntiresias: 164494 events in 0.152 s (1.08 M events/s), 180534 policy passes, peak memory 58 MB\n";
        assert_eq!(parse_timing(e), Some((164_494, 0.152, 58.0)));
        assert_eq!(parse_timing("nothing here"), None);
    }
}
