//! The cases `apiary bench` runs: each an `apiary` command line and its name, from
//! the committed samples and, where they are, the traces in `../shared`.

use super::Case;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Owned arguments.
fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Every case to run: with `full`, the 1 M-job runs too (generating their trace once,
/// with `exe`, into `work`).
pub(super) fn all(shared: Option<&Path>, full: bool, work: &Path, exe: &Path) -> Result<Vec<Case>> {
    let mut cases = vec![
        Case {
            name: "sample, tiresias, n64g8".into(),
            args: s(&["simulate", "-p", "tiresias"]),
        },
        // The IO model's cost: SiloD on its storage model against plain SJF.
        Case {
            name: "sample, sjf, n64g8".into(),
            args: s(&["simulate", "-p", "sjf"]),
        },
        Case {
            name: "sample, silod --io default, n64g8".into(),
            args: s(&["simulate", "-p", "silod", "--io", "default"]),
        },
    ];
    philly(shared, &mut cases);
    if let Some(d) = shared {
        muri(d, &mut cases);
    }
    pollux(work, &mut cases)?;
    if let Some(d) = shared {
        gavel(d, work, &mut cases)?;
        elasticflow(d, full, &mut cases);
    }
    llm(shared, &mut cases);
    if full {
        synthetic(work, exe, &mut cases)?;
    }
    Ok(cases)
}

/// The name of the Philly case under `policy` (Tiresias, SRTF, Gandiva).
pub(super) fn philly_case(policy: &str) -> String {
    format!("philly 82,247 jobs, {policy}, philly")
}

/// The name of the Philly case under a VC-sharing `policy` (HiveD, quota).
pub(super) fn philly_vc_case(policy: &str) -> String {
    format!("philly 82,247 jobs, {policy} (tiresias in 15 VCs)")
}

/// The name of the Philly case under Muri-L.
pub(super) const PHILLY_MURI_L: &str = "philly 82,247 jobs, muri-l (drawn models), philly";

/// The name of the Pollux case.
pub(super) const POLLUX: &str = "pollux workload 6, 160 jobs, pollux, n16g4";

/// The name of the 1 M-job case under `policy`.
pub(super) fn synthetic_case(policy: &str) -> String {
    format!("synthetic 1,000,000 jobs, {policy}, n1250g8")
}

/// The Philly summary trace under Tiresias, SRTF, Gandiva, the VC-sharing policies and
/// Muri-L.
fn philly(shared: Option<&Path>, cases: &mut Vec<Case>) {
    match shared.map(|d| d.join("philly/philly.csv")) {
        Some(p) if p.is_file() => {
            let t = p.display().to_string();
            for pol in ["tiresias", "srtf", "gandiva"] {
                cases.push(Case {
                    name: philly_case(pol),
                    args: s(&["simulate", "-t", &t, "-c", "philly", "-p", pol]),
                });
            }
            for pol in ["hived", "quota"] {
                cases.push(Case {
                    name: philly_vc_case(pol),
                    args: s(&["simulate", "-t", &t, "-c", "philly", "-p", pol]),
                });
            }
            cases.push(Case {
                name: PHILLY_MURI_L.into(),
                args: s(&["simulate", "-t", &t, "-c", "philly", "-p", "muri-l"]),
            });
        }
        _ => eprintln!(
            "note: ../shared/traces/philly/philly.csv not found; Philly cases skipped (pass --traces DIR)"
        ),
    }
}

/// Muri's testbed trace with its simulator's per-event overhead.
fn muri(d: &Path, cases: &mut Vec<Case>) {
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

/// Pollux's workload 6 (committed).
fn pollux(work: &Path, cases: &mut Vec<Case>) -> Result<()> {
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
        name: POLLUX.into(),
        args: s(&["simulate", "-t", &t, "-c", "n16g4", "-p", "pollux"]),
    });
    Ok(())
}

/// Gavel's physical-cluster trace on its three GPU types, aware and agnostic.
fn gavel(d: &Path, work: &Path, cases: &mut Vec<Case>) -> Result<()> {
    let gavel = d.join("peers/gavel/physical_cluster/max_min_fairness.trace");
    if gavel.is_file() {
        std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
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
    Ok(())
}

/// ElasticFlow's traces.
fn elasticflow(d: &Path, full: bool, cases: &mut Vec<Case>) {
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

/// LLM serving: the committed sample, the Azure conversation hour, a Llumnix grid
/// point and the pool samples.
fn llm(shared: Option<&Path>, cases: &mut Vec<Case>) {
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
    // Disaggregation against colocated serving on the same 8 GPUs (issue 54: a
    // disaggregated run at most twice as long as a colocated one).
    let a100 = ["--model", "Llama-2-7B", "--gpu", "A100", "--rate", "20"];
    cases.push(Case {
        name: "llm sample at 20/s, disaggregated 2:6 x Llama-2-7B on A100".into(),
        args: s(&[&["llm", "simulate", "--disagg", "2:6"][..], &a100].concat()),
    });
    cases.push(Case {
        name: "llm sample at 20/s, colocated 8 x Llama-2-7B on A100, llumnix".into(),
        args: s(&[
            &["llm", "simulate", "--instances", "8", "-p", "llumnix"][..],
            &a100,
        ]
        .concat()),
    });
}

/// The 1 M-job synthetic trace under SRTF and Tiresias.
fn synthetic(work: &Path, exe: &Path, cases: &mut Vec<Case>) -> Result<()> {
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let synth: PathBuf = work.join("synth-1m.csv");
    if !synth.is_file() {
        eprintln!("generating {} ...", synth.display());
        let st = Command::new(exe)
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
            name: synthetic_case(pol),
            args: s(&["simulate", "-t", &t, "-c", "n1250g8", "-p", pol]),
        });
    }
    Ok(())
}
