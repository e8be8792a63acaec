//! `apiary bench`: the performance figures the README quotes, measured the same way every
//! time. Each case runs `apiary simulate` in a child process, so its peak memory is its
//! own, and the child's timing line is parsed for events, wall time and peak memory.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
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
pub fn bench(shared: Option<&Path>, full: bool, work: &Path, json: bool) -> Result<()> {
    let exe = std::env::current_exe().context("finding the apiary binary")?;
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut cases = vec![Case {
        name: "sample, tiresias, n64g8".into(),
        args: s(&["simulate", "-p", "tiresias"]),
    }];
    match shared.map(|d| d.join("philly/philly.csv")) {
        Some(p) if p.is_file() => {
            let t = p.display().to_string();
            for pol in ["tiresias", "srtf", "gandiva"] {
                cases.push(Case {
                    name: format!("philly 82,247 jobs, {pol}, philly"),
                    args: s(&["simulate", "-t", &t, "-c", "philly", "-p", pol]),
                });
            }
            for pol in ["hived", "quota"] {
                cases.push(Case {
                    name: format!("philly 82,247 jobs, {pol} (tiresias in 15 VCs)"),
                    args: s(&["simulate", "-t", &t, "-c", "philly", "-p", pol]),
                });
            }
        }
        _ => eprintln!(
            "note: ../shared/traces/philly/philly.csv not found; Philly cases skipped (pass --traces DIR)"
        ),
    }
    if let Some(d) = shared {
        let muri = d.join("peers/muri/cluster_exp/cluster_trace.csv");
        if muri.is_file() {
            let t = muri.display().to_string();
            cases.push(Case {
                name: "muri 400 jobs, tiresias, n8g8 (artifact quirks)".into(),
                args: s(&[
                    "simulate",
                    "-t",
                    &t,
                    "-c",
                    "n8g8",
                    "-p",
                    "tiresias",
                    "--per-event-overhead",
                ]),
            });
        }
    }
    if full {
        std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
        let synth: PathBuf = work.join("synth-1m.csv");
        if !synth.is_file() {
            eprintln!("generating {} ...", synth.display());
            let st = Command::new(&exe)
                .args(s(&[
                    "trace", "synth", "--jobs", "1000000", "--gpus", "10000", "--seed", "1", "-o",
                ]))
                .arg(&synth)
                .status()
                .context("running apiary trace synth")?;
            if !st.success() {
                bail!("apiary trace synth failed");
            }
        }
        let t = synth.display().to_string();
        for pol in ["srtf", "tiresias"] {
            cases.push(Case {
                name: format!("synthetic 1,000,000 jobs, {pol}, n1250g8"),
                args: s(&["simulate", "-t", &t, "-c", "n1250g8", "-p", pol]),
            });
        }
    }
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
    let out = Command::new(&exe)
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
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "runs": figs,
                "hived_decision": decision,
            }))?
        );
        return Ok(());
    }
    println!(
        "{:<50} {:>10} {:>9} {:>12} {:>9}",
        "case", "events", "wall s", "M events/s", "peak MB"
    );
    for f in &figs {
        println!(
            "{:<50} {:>10} {:>9.3} {:>12.2} {:>9.0}",
            f.case,
            f.events,
            f.wall_s,
            f.events_per_s / 1e6,
            f.peak_mb
        );
    }
    let us = |k: &str| decision[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "hived decision (apiary hived bench): 10,000 GPUs, 50 VCs: median {:.1} us, p99 {:.1} us",
        us("median_us"),
        us("p99_us")
    );
    Ok(())
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
