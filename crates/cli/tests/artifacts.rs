//! Figures of peers' published code, run unmodified (never a re-typed copy), that our
//! artifact modes must give on the same inputs. Each case names the command that
//! produced the figure; the peer's code is not in this repository.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{BIN, shared};

fn run(args: &[&str]) -> Vec<u8> {
    let o = Command::new(BIN).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "apiary {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

fn metrics(args: &[&str]) -> Value {
    let mut all = vec!["simulate", "--json"];
    all.extend_from_slice(args);
    let v: Value = serde_json::from_slice(&run(&all)).unwrap();
    let run = v.get("runs").and_then(|r| r.get(0)).cloned().unwrap_or(v);
    run.get("metrics").cloned().unwrap_or(run)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("apiary-artifacts-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `job_id -> second it ended`, from the code's `job.csv` (its `time` column, the event
/// that ended the job) or from our `jobs.csv` (finished jobs' `finish`).
fn ends(
    path: &Path,
    id: &str,
    end: &str,
    keep: impl Fn(&BTreeMap<&str, &str>) -> bool,
) -> BTreeMap<String, i64> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let mut out = BTreeMap::new();
    for line in lines {
        let row: BTreeMap<&str, &str> = header.iter().copied().zip(line.split(',')).collect();
        if keep(&row) {
            let t: f64 = row[end].parse().unwrap();
            out.insert(row[id].to_string(), t as i64);
        }
    }
    out
}

/// ElasticFlow's `scheduler.py` (pkusys/ElasticFlow 04a0109, CPython 3.11, numpy 2.4,
/// cvxpy 1.9, protobuf 3.20.3), run unmodified as `testdata/elasticflow-artifact/README.md`
/// gives: each run's admitted and declined counts, its `job.csv` (how many jobs, their
/// mean JCT, and the second each one ended). `progress=artifact` gives the same, job by
/// job.
#[test]
fn elasticflow_progress_artifact_gives_the_unmodified_codes_figures() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/elasticflow-artifact");
    let runs = std::fs::read_to_string(dir.join("runs.csv")).unwrap();
    for line in runs.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let [
            name,
            trace,
            cluster,
            params,
            admitted,
            declined,
            jobs,
            jct,
            _wall,
        ] = f[..]
        else {
            panic!("runs.csv: {line}");
        };
        let out = scratch(name);
        let trace = if let Some(rel) = trace.strip_prefix("shared:") {
            let Some(t) = shared(rel) else { continue };
            t
        } else {
            let flags = trace.strip_prefix("gen:").expect("shared: or gen:");
            let t = out.join("trace.csv");
            let mut args = vec!["trace", "elasticflow"];
            args.extend(flags.split(' '));
            args.extend(["-o", t.to_str().unwrap()]);
            run(&args);
            t
        };
        let mut args = vec![
            "-t",
            trace.to_str().unwrap(),
            "-c",
            cluster,
            "-p",
            "elasticflow",
        ];
        args.extend(["--set", "progress=artifact"]);
        for p in params.split(' ').filter(|p| !p.is_empty()) {
            args.extend(["--set", p]);
        }
        let o = out.join("out");
        args.extend(["-o", o.to_str().unwrap()]);
        let m = metrics(&args);

        let (a, d): (f64, f64) = (admitted.parse().unwrap(), declined.parse().unwrap());
        let got = m["deadline_ratio"].as_f64().unwrap();
        assert!(
            (got - a / (a + d)).abs() < 1e-9,
            "{name}: ratio {got}, code {}",
            a / (a + d)
        );
        assert_eq!(
            m["finished"].as_u64(),
            Some(jobs.parse().unwrap()),
            "{name}: {m}"
        );
        let code = ends(&dir.join(format!("{name}.csv")), "job_id", "ended", |_| {
            true
        });
        let ours = ends(&o.join("jobs.csv"), "id", "finish", |r| {
            r["status"] == "finished"
        });
        assert_eq!(code.len(), ours.len(), "{name}: jobs that ran");
        for (job, t) in &code {
            assert_eq!(
                ours.get(job),
                Some(t),
                "{name}: job {job} ended at {t} in the code"
            );
        }
        // The code's JCT ends a job that finished early at the second its work ended,
        // ours at the event that ends it (the second compared above): up to 1.7 s on
        // the mean (Fig. 9's `ef` loop), 0.04 s with admission control.
        let mean = m["jct_mean"].as_f64().unwrap();
        let jct: f64 = jct.parse().unwrap();
        assert!(
            (mean - jct).abs() < 2.0,
            "{name}: mean JCT {mean}, code {jct}"
        );
        let _ = std::fs::remove_dir_all(&out);
    }
}
