//! `apiary bench`: the performance figures the README quotes, measured the same way every
//! time. Each simulation case runs `apiary simulate` in a child process, so its peak
//! memory is its own, and the child's timing line is parsed for events, wall time and
//! peak memory. Trace reading and the live service are measured in-process. Every run
//! is kept in a history and printed beside the last one.

mod history;
mod live;
mod parse;

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
            cases.push(Case {
                name: "philly 82,247 jobs, muri-l (drawn models), philly".into(),
                args: s(&["simulate", "-t", &t, "-c", "philly", "-p", "muri-l"]),
            });
        }
        _ => eprintln!(
            "note: ../shared/traces/philly/philly.csv not found; Philly cases skipped (pass --traces DIR)"
        ),
    }
    if let Some(d) = shared {
        let muri = d.join("peers/muri/cluster_exp/cluster_trace.csv");
        if muri.is_file() {
            let t = muri.display().to_string();
            for pol in ["tiresias", "themis", "antman", "muri-s"] {
                cases.push(Case {
                    name: format!("muri 400 jobs, {pol}, n8g8 (artifact quirks)"),
                    args: s(&[
                        "simulate",
                        "-t",
                        &t,
                        "-c",
                        "n8g8",
                        "-p",
                        pol,
                        "--per-event-overhead",
                    ]),
                });
            }
        }
    }
    {
        // Pollux's workload 6 ships in testdata; written out so that the case runs from
        // any directory.
        std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
        let w = work.join("pollux-workload-6.csv");
        std::fs::write(
            &w,
            include_str!("../../../../testdata/traces/pollux-workload-6.csv"),
        )
        .with_context(|| format!("writing {}", w.display()))?;
        let t = w.display().to_string();
        cases.push(Case {
            name: "pollux workload 6, 160 jobs, pollux, n16g4".into(),
            args: s(&["simulate", "-t", &t, "-c", "n16g4", "-p", "pollux"]),
        });
    }
    if let Some(d) = shared {
        let gavel = d.join("peers/gavel/physical_cluster/max_min_fairness.trace");
        if gavel.is_file() {
            std::fs::create_dir_all(work)
                .with_context(|| format!("creating {}", work.display()))?;
            let cluster = work.join("gavel-physical.toml");
            std::fs::write(
                &cluster,
                include_str!("../../../../testdata/clusters/gavel-physical.toml"),
            )
            .with_context(|| format!("writing {}", cluster.display()))?;
            let (t, c) = (gavel.display().to_string(), cluster.display().to_string());
            for (name, extra) in [("gavel", "perf=true"), ("gavel agnostic", "perf=false")] {
                cases.push(Case {
                    name: format!("gavel max_min_fairness 96 jobs, {name}, 48 GPUs of 3 types"),
                    args: s(&[
                        "simulate", "-t", &t, "-c", &c, "-p", "gavel", "--set", extra,
                    ]),
                });
            }
        }
    }
    if let Some(d) = shared {
        // ElasticFlow's runs: its ITP and Philly traces, slot 60 s, the artifact's
        // greedy; cluster04 (1,024 GPUs) only with --full.
        let mut ef = vec![
            (
                "itp/elasticflow/cluster10.csv",
                "n32g8",
                "ITP cluster10 260 jobs",
                "",
            ),
            (
                "philly/elasticflow_philly_103959.csv",
                "n32g8",
                "philly VC 103959 876 jobs",
                "",
            ),
            (
                "itp/elasticflow/cluster01.csv",
                "n64g8",
                "ITP cluster01 1,595 jobs",
                "",
            ),
        ];
        if full {
            ef.push((
                "itp/elasticflow/cluster04.csv",
                "n128g8",
                "ITP cluster04 15,802 jobs",
                "",
            ));
            ef.push((
                "itp/elasticflow/cluster04.csv",
                "n128g8",
                "ITP cluster04 15,802 jobs",
                "greedy=throughput",
            ));
        }
        for (file, cluster, name, set) in ef {
            let p = d.join(file);
            if !p.is_file() {
                continue;
            }
            let t = p.display().to_string();
            let mut args = s(&["simulate", "-t", &t, "-c", cluster, "-p", "elasticflow"]);
            if !set.is_empty() {
                args.extend(s(&["--set", set]));
            }
            let policy = if set.is_empty() {
                "elasticflow".to_string()
            } else {
                format!("elasticflow {set}")
            };
            cases.push(Case {
                name: format!("{name}, {policy}, {cluster}"),
                args,
            });
        }
    }
    // LLM serving (`apiary llm`): the committed sample, and the hour of the Azure
    // conversation trace and one point of Llumnix's Fig. 11 grid where the shared data is.
    let llm = |t: Option<&str>, extra: &[&str]| {
        let mut a = s(&["llm", "simulate", "-p", "llumnix"]);
        if let Some(t) = t {
            a.extend(s(&["-t", t]));
        }
        a.extend(s(extra));
        a
    };
    cases.push(Case {
        name: "llm sample, 2,000 requests, llumnix, 16 x Llama-2-7B on A10".into(),
        args: llm(None, &[]),
    });
    let conv = shared.and_then(|d| {
        Some(
            d.parent()?
                .join("llm/traces/AzureLLMInferenceTrace_conv.csv"),
        )
    });
    match conv {
        Some(p) if p.is_file() => cases.push(Case {
            name: "llm azure conv 19,366 requests, llumnix, 16 x Llama-2-7B on A10".into(),
            args: llm(Some(&p.display().to_string()), &[]),
        }),
        _ => eprintln!("note: ../shared/llm/traces not found; the Azure LLM case is skipped"),
    }
    cases.push(Case {
        name: "llm powerlaw M-M 10,000 requests at 7.4/s, llumnix, 16 x LLaMA-7B on A10".into(),
        args: llm(
            Some("powerlaw:M-M"),
            &[
                "--rate",
                "7.4",
                "--model",
                "llama-7b",
                "--max-len",
                "12288",
                "--set",
                "migrate_threshold=10",
            ],
        ),
    });
    cases.push(Case {
        name: "llm pool samples, chat + code (3,000 requests), seallm, 4 x A100".into(),
        args: s(&["llm", "pool", "-p", "seallm"]),
    });
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
    let lf = live::live(work)?;
    let record = serde_json::json!({
        "runs": figs,
        "parse": reads,
        "hived_decision": decision,
        "live": lf,
    });
    history::append(work, record.clone())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&record)?);
        return Ok(());
    }
    let last = previous.as_ref();
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
    for f in &figs {
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
    for r in &reads {
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
    println!(
        "live durable submissions over HTTP (redb, {} clients): {:.0} jobs/s",
        lf.submit_clients, lf.submit_per_s
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
