//! `apiary sweep` through the real binary on the committed example: results do not
//! depend on the number of threads, a rerun resumes, a failing cell is reported without
//! stopping the others, and the report aggregates what was run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_apiary");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example() -> PathBuf {
    root().join("testdata/sweeps/philly-load.toml")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("apiary-sweep-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn apiary(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run_sweep(file: &Path, out: &Path, threads: &str) -> Output {
    apiary(&[
        "sweep",
        "run",
        file.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-j",
        threads,
        "-q",
    ])
}

#[test]
fn threads_do_not_change_results_and_a_rerun_resumes() {
    let (one, two) = (scratch("one"), scratch("two"));
    let a = run_sweep(&example(), &one, "1");
    assert!(a.status.success(), "{}", text(&a.stderr));
    let b = run_sweep(&example(), &two, "2");
    assert!(b.status.success(), "{}", text(&b.stderr));
    let ra = std::fs::read(one.join("results.csv")).unwrap();
    assert_eq!(ra, std::fs::read(two.join("results.csv")).unwrap());
    // 5 loads x 3 policies x 3 seeds, and a header.
    assert_eq!(text(&ra).lines().count(), 46);
    assert!(text(&ra).starts_with("cell,trace,cluster,load,setting,seed,jct_mean,"));

    // Lose two cells and the merged file: a rerun runs only those two.
    std::fs::remove_file(two.join("cells/000007.csv")).unwrap();
    std::fs::remove_file(two.join("cells/000030.csv")).unwrap();
    std::fs::remove_file(two.join("results.csv")).unwrap();
    let c = apiary(&[
        "sweep",
        "run",
        example().to_str().unwrap(),
        "-o",
        two.to_str().unwrap(),
    ]);
    assert!(c.status.success(), "{}", text(&c.stderr));
    assert!(
        text(&c.stderr).contains("45 cells, 43 already done, 2 to run"),
        "{}",
        text(&c.stderr)
    );
    assert_eq!(ra, std::fs::read(two.join("results.csv")).unwrap());

    // The report: a row per configuration, ratios against fifo, charts.
    let r = apiary(&["sweep", "report", one.to_str().unwrap()]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let out = text(&r.stdout);
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("philly-sample"))
            .count(),
        15
    );
    assert!(out.contains("tiresias: mean JCT "), "{out}");
    let html = std::fs::read_to_string(one.join("report.html")).unwrap();
    // Per metric, the chart against load and the one relative to the baseline.
    assert_eq!(html.matches("<svg").count(), 6);
    assert!(html.contains("mean JCT against load"));
    assert!(html.contains("mean JCT relative to fifo"));
    for d in [one, two] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_failing_cell_is_reported_and_the_others_run() {
    let dir = scratch("fail");
    std::fs::create_dir_all(&dir).unwrap();
    let sample = root().join("testdata/traces/philly-sample.csv");
    let file = dir.join("s.toml");
    std::fs::write(
        &file,
        format!(
            "clusters = [\"n32g8\"]\nseeds = 2\n\
             [[trace]]\npath = \"{}\"\nname = \"good\"\nsample = 200\n\
             [[trace]]\npath = \"missing.csv\"\nname = \"bad\"\n\
             [[policy]]\nname = \"fifo\"\n",
            sample.display()
        ),
    )
    .unwrap();
    let out = dir.join("out");
    let o = run_sweep(&file, &out, "2");
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("2 of 4 cells failed"), "{err}");
    assert!(err.contains("missing.csv"), "{err}");
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 4);
    assert!(rows[..2].iter().all(|r| r.ends_with(',')), "{csv}");
    assert!(rows[2..].iter().all(|r| r.contains("missing.csv")), "{csv}");

    // Another sweep file into the same folder is refused.
    let other = dir.join("t.toml");
    std::fs::write(
        &other,
        std::fs::read_to_string(&file)
            .unwrap()
            .replace("seeds = 2", "seeds = 3"),
    )
    .unwrap();
    let o = run_sweep(&other, &out, "1");
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("different sweep file"),
        "{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn plan_lists_cells_and_bad_files_name_the_field() {
    let p = apiary(&["sweep", "plan", example().to_str().unwrap()]);
    assert!(p.status.success());
    let out = text(&p.stdout);
    assert!(
        out.starts_with(
            "philly-load: 45 cells = 1 traces x 1 clusters x 5 loads x 3 settings x 3 seeds"
        ),
        "{out}"
    );
    let dir = scratch("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(&f, "clusters = [\"n8g8\"]\nloads = [1, 0]\n[[trace]]\npath = \"x.csv\"\n[[policy]]\nname = \"fifo\"\n").unwrap();
    let o = apiary(&["sweep", "plan", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.contains("bad.toml") && err.contains("loads[1]"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn run_env(args: &[&str], var: &str, value: &str) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .env(var, value)
        .output()
        .unwrap()
}

#[test]
fn shards_from_any_launcher_merge_to_the_local_runs_bytes() {
    let (planned, local) = (scratch("planned"), scratch("local"));
    let dir = planned.to_str().unwrap();
    let p = apiary(&["sweep", "plan", example().to_str().unwrap(), "-o", dir]);
    assert!(p.status.success(), "{}", text(&p.stderr));
    let manifest = std::fs::read_to_string(planned.join("manifest.toml")).unwrap();
    assert_eq!(manifest.matches("[[cell]]").count(), 45);
    // Paths in the manifest are resolved, for tasks that start in another folder.
    assert!(
        manifest.contains("testdata/traces/philly-sample.csv\""),
        "{manifest}"
    );
    assert!(!manifest.contains("/../"), "{manifest}");

    // 45 cells in shards of 4 make 12; run them in a scrambled order, as Slurm array
    // tasks, Kubernetes pods and by hand would, half of them twice.
    let order = [11, 3, 7, 0, 5, 9, 1, 10, 2, 8, 6, 4, 3, 0, 11, 5];
    for (k, i) in order.iter().enumerate() {
        let i = i.to_string();
        let args = ["sweep", "run", dir, "--count", "4", "-q"];
        let o = match k % 3 {
            0 => run_env(&args, "SLURM_ARRAY_TASK_ID", &i),
            1 => run_env(&args, "JOB_COMPLETION_INDEX", &i),
            _ => apiary(&["sweep", "run", dir, "--count", "4", "--index", &i, "-q"]),
        };
        assert!(o.status.success(), "shard {i}: {}", text(&o.stderr));
        // A shard writes its cells and does not merge.
        assert!(!planned.join("results.csv").exists());
    }
    let m = apiary(&["sweep", "merge", dir]);
    assert!(m.status.success(), "{}", text(&m.stderr));
    assert!(
        text(&m.stderr).contains("merged 45 of 45 cells"),
        "{}",
        text(&m.stderr)
    );
    let l = run_sweep(&example(), &local, "2");
    assert!(l.status.success(), "{}", text(&l.stderr));
    assert_eq!(
        std::fs::read(planned.join("results.csv")).unwrap(),
        std::fs::read(local.join("results.csv")).unwrap()
    );

    // A shard past the last one, and a merge with cells missing, say what is wrong.
    let o = apiary(&["sweep", "run", dir, "--count", "4", "--index", "12"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr)
            .contains("shard 12 does not exist: 45 cells in shards of 4 make 12 shards (0 to 11)"),
        "{}",
        text(&o.stderr)
    );
    for c in ["000004.csv", "000005.csv", "000006.csv", "000040.csv"] {
        std::fs::remove_file(planned.join("cells").join(c)).unwrap();
    }
    let m = apiary(&["sweep", "merge", dir]);
    assert_eq!(m.status.code(), Some(1));
    assert!(
        text(&m.stderr).contains("cells with no result yet: 4-6, 40"),
        "{}",
        text(&m.stderr)
    );
    for d in [planned, local] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn launchers_write_a_job_array_and_an_indexed_job() {
    let planned = scratch("launch");
    let dir = planned.to_str().unwrap();
    let p = apiary(&["sweep", "plan", example().to_str().unwrap(), "-o", dir]);
    assert!(p.status.success(), "{}", text(&p.stderr));
    let args = [
        "--count",
        "4",
        "--parallel",
        "3",
        "-j",
        "2",
        "--apiary",
        "/opt/apiary",
    ];
    let s = apiary(&[&["sweep", "slurm", dir, "--time", "30"][..], &args].concat());
    assert!(s.status.success(), "{}", text(&s.stderr));
    let script = std::fs::read_to_string(planned.join("sweep.sbatch")).unwrap();
    let abs = std::fs::canonicalize(&planned).unwrap();
    for line in [
        "#SBATCH --array=0-11%3".to_string(),
        "#SBATCH --cpus-per-task=2".into(),
        "#SBATCH --time=30".into(),
        format!("#SBATCH --output={}/logs/shard-%a.out", abs.display()),
        format!(
            "exec /opt/apiary sweep run {} --count 4 -j 2",
            abs.display()
        ),
    ] {
        assert!(
            script.lines().any(|l| l == line),
            "no '{line}' in:\n{script}"
        );
    }
    let submit = text(&s.stdout);
    assert!(submit.starts_with("jid=$(sbatch --parsable "), "{submit}");
    assert!(submit.contains("--dependency=afterany:$jid"), "{submit}");
    assert!(submit.contains("sweep merge"), "{submit}");

    let k = apiary(
        &[
            &["sweep", "slurm", dir, "--emit", "k8s", "--claim", "sweeps"][..],
            &args,
        ]
        .concat(),
    );
    assert!(k.status.success(), "{}", text(&k.stderr));
    let yaml = std::fs::read_to_string(planned.join("sweep-job.yaml")).unwrap();
    let job: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(job["apiVersion"], "batch/v1");
    assert_eq!(job["kind"], "Job");
    assert_eq!(job["metadata"]["name"], "apiary-sweep-philly-load");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["completions"], 12);
    assert_eq!(spec["parallelism"], 3);
    assert_eq!(spec["backoffLimitPerIndex"], 2);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let c = &pod["containers"][0];
    let cmd: Vec<&str> = c["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let d = abs.display().to_string();
    assert_eq!(
        cmd,
        ["/opt/apiary", "sweep", "run", &d, "--count", "4", "-j", "2"]
    );
    assert_eq!(c["resources"]["requests"]["cpu"], "2");
    assert_eq!(c["volumeMounts"][0]["mountPath"], d.as_str());
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "sweeps"
    );
    // An unplanned folder is refused with what to do.
    let o = apiary(&["sweep", "slurm", std::env::temp_dir().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("plan it first"),
        "{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(planned);
}

/// `per_vc` collects metrics per VC into vc-results.csv, with either thread count
/// alike, and the report charts each VC's against load.
#[test]
fn per_vc_metrics_are_collected_and_charted_against_load() {
    let file = root().join("testdata/sweeps/philly-vcs.toml");
    let (one, two) = (scratch("vc-one"), scratch("vc-two"));
    for (dir, threads) in [(&one, "1"), (&two, "2")] {
        let o = run_sweep(&file, dir, threads);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let vcs = std::fs::read_to_string(one.join("vc-results.csv")).unwrap();
    assert_eq!(
        vcs,
        std::fs::read_to_string(two.join("vc-results.csv")).unwrap()
    );
    let mut lines = vcs.lines();
    assert_eq!(
        lines.next(),
        Some("cell,trace,cluster,load,setting,seed,vc,jct_mean,pending_mean")
    );
    // Every cell (3 loads x 3 policies x 3 seeds) has a row per VC of its jobs.
    let cells: std::collections::BTreeSet<&str> =
        lines.map(|l| l.split(',').next().unwrap()).collect();
    assert_eq!(cells.len(), 27, "{vcs}");
    assert!(vcs.contains(",hived,0,103959,"), "{vcs}");
    let o = apiary(&["sweep", "report", one.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let chart = one.join("charts/philly-sample_VC_103959-n48g8-pending_mean.svg");
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.contains("philly-sample VC 103959"), "{svg}");
    let page = std::fs::read_to_string(one.join("report.html")).unwrap();
    assert!(page.contains("<h2>Per VC</h2>"));
    assert!(page.contains("<h3>philly-sample VC 103959 on n48g8</h3>"));
}

#[test]
fn an_llm_sweep_cell_is_what_llm_simulate_prints() {
    let out = scratch("llm");
    let file = root().join("testdata/sweeps/llm-llumnix.toml");
    let r = run_sweep(&file, &out, "2");
    assert!(r.status.success(), "{}", text(&r.stderr));
    let csv = text(&std::fs::read(out.join("results.csv")).unwrap());
    // 2 cluster sizes x 3 rates x 3 policies x 5 seeds, and a header.
    assert_eq!(csv.lines().count(), 91);
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(
        head[..8],
        [
            "cell",
            "trace",
            "cluster",
            "load",
            "setting",
            "seed",
            "ttft_mean_s",
            "ttft_p99_s"
        ]
    );
    let row: Vec<&str> = csv
        .lines()
        .find(|l| l.contains(",6xA10,3,llumnix,2,"))
        .unwrap()
        .split(',')
        .collect();
    let sim = apiary(&[
        "llm",
        "simulate",
        "-p",
        "llumnix",
        "--model",
        "llama-7b",
        "--instances",
        "6",
        "--rate",
        "3",
        "--seed",
        "2",
        "--json",
        "-q",
    ]);
    assert!(sim.status.success(), "{}", text(&sim.stderr));
    let json: serde_json::Value = serde_json::from_slice(&sim.stdout).unwrap();
    for (i, key) in head.iter().enumerate().take(12).skip(6) {
        let cell: f64 = row[i].parse().unwrap();
        assert_eq!(cell, json[key].as_f64().unwrap(), "{key}");
    }
    // The report names the axis a rate and draws latencies in seconds.
    let rep = apiary(&["sweep", "report", out.to_str().unwrap()]);
    assert!(rep.status.success(), "{}", text(&rep.stderr));
    let table = text(&rep.stdout);
    assert!(
        table.contains("at rate 3.5 on azure-conv-sample / 6xA10"),
        "{table}"
    );
    let html = text(&std::fs::read(out.join("report.html")).unwrap());
    assert!(html.contains("rate (requests/s)"));
}
