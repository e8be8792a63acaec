//! Figures of peers' published code, run unmodified (never a re-typed copy), that our
//! artifact modes must give on the same inputs. Each case names the command that
//! produced the figure; the peer's code is not in this repository.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_apiary");

fn shared(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces")
        .join(rel);
    if p.is_file() {
        return Some(p);
    }
    assert!(
        std::env::var("CI").is_err(),
        "{} missing under CI",
        p.display()
    );
    eprintln!("skipping: {} not present", p.display());
    None
}

fn metrics(args: &[&str]) -> Value {
    let o = Command::new(BIN)
        .arg("simulate")
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let run = v.get("runs").and_then(|r| r.get(0)).cloned().unwrap_or(v);
    run.get("metrics").cloned().unwrap_or(run)
}

/// ElasticFlow's `scheduler.py` (pkusys/ElasticFlow 04a0109, CPython 3.11, numpy 2.4,
/// cvxpy 1.9, protobuf 3.20.3):
/// `python3 scheduler.py --cluster_spec=cluster_specs/SPEC.csv --scheme=elastic
/// --schedule=ef-accessctrl --trace_file=TRACE --simulation=True --scheduling_slot=60
/// --gpu_type=GPU`. Its `final_result.csv` ratio; `job.csv`'s rows and mean JCT.
#[test]
fn elasticflow_progress_artifact_gives_the_unmodified_codes_figures() {
    let cases: &[(&str, &str, f64, u64, f64)] = &[
        // (trace, cluster, ratio, jobs in job.csv, mean JCT s)
        (
            "itp/elasticflow/cluster10.csv",
            "n32g8",
            250.0 / 260.0,
            251,
            12_980.9,
        ),
        (
            "philly/elasticflow_philly_103959.csv",
            "n32g8",
            797.0 / 876.0,
            799,
            23_210.9,
        ),
        (
            "peers/elasticflow/elasticVpollux_e.csv",
            "n16g4-T4",
            142.0 / 195.0,
            145,
            74_735.8,
        ),
    ];
    for &(trace, cluster, ratio, finished, jct) in cases {
        let Some(t) = shared(trace) else { continue };
        let m = metrics(&[
            "-t",
            t.to_str().unwrap(),
            "-c",
            cluster,
            "-p",
            "elasticflow",
            "--set",
            "progress=artifact",
        ]);
        let got = m["deadline_ratio"].as_f64().unwrap();
        assert!(
            (got - ratio).abs() < 1e-9,
            "{trace}: ratio {got}, code {ratio}"
        );
        assert_eq!(m["finished"].as_u64(), Some(finished), "{trace}: {m}");
        let mean = m["jct_mean"].as_f64().unwrap();
        // The code dates an early finish at the second its work ends, ours at the
        // decision that sees it: 8 s on one Philly job, 0.01 s on the mean.
        assert!(
            (mean - jct).abs() < 0.1,
            "{trace}: mean JCT {mean}, code {jct}"
        );
    }
}
