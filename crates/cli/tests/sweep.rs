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
    assert!(out.contains("tiresias: jct_mean"), "{out}");
    let html = std::fs::read_to_string(one.join("report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 3);
    assert!(html.contains("jct_mean against load"));
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
