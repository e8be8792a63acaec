//! The reports people read, through the real binary and a real browser: `compare`'s
//! and `sweep report`'s report.html have an HTML table with human units, ratios against
//! the baseline, headlines, and full-width charts whose legends sit off the data; the
//! terminal table reads the same way. Headless Chromium renders each page to a
//! screenshot (kept under target/ to look at) and its DOM is checked.

mod common;

use common::chromium;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_apiary");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("apiary-reports-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn apiary(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Renders `page` to `png` at 1200 px wide and returns the DOM Chromium built.
fn render(bin: &str, page: &Path, png: &Path) -> String {
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    let profile = scratch(&format!(
        "profile-{}",
        png.file_stem().unwrap().to_string_lossy()
    ));
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ];
    let user = format!("--user-data-dir={}", profile.display());
    let shot = Command::new(bin)
        .args(flags)
        .arg(&user)
        .arg("--window-size=1200,2400")
        .arg(format!("--screenshot={}", png.display()))
        .arg(&url)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(shot.status.success(), "chromium failed on {url}");
    let png_bytes = std::fs::read(png).unwrap();
    // A PNG of the window's size: the IHDR chunk's width and height.
    assert_eq!(&png_bytes[1..4], b"PNG");
    let w = u32::from_be_bytes(png_bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png_bytes[20..24].try_into().unwrap());
    assert_eq!((w, h), (1200, 2400));
    // Drawn charts and a table compress far worse than a blank page (~10 KB).
    assert!(
        png_bytes.len() > 60_000,
        "{} bytes: a blank page?",
        png_bytes.len()
    );
    let dom = Command::new(bin)
        .args(flags)
        .arg(&user)
        .arg("--dump-dom")
        .arg(&url)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(dom.status.success());
    let _ = std::fs::remove_dir_all(profile);
    text(&dom.stdout)
}

/// Where screenshots are kept to be looked at.
fn shots() -> PathBuf {
    let d = root().join("target/report-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn compare_report_reads_like_a_paper_table() {
    let dir = scratch("compare");
    let d = dir.to_str().unwrap();
    // A file another comparison left: not mixed into this one.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("gandiva-jobs.csv"), "old").unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let o = apiary(&["compare", "-q", "-p", "fifo,srtf,tiresias", "-o", d]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        !dir.join("gandiva-jobs.csv").exists(),
        "an old run's file was left"
    );
    assert!(
        dir.join("notes.txt").exists(),
        "a file apiary did not write was removed"
    );
    let out = text(&o.stdout);
    // Human units and ratios against the first policy in the terminal table.
    let jct = out.lines().find(|l| l.starts_with("mean JCT")).unwrap();
    assert!(jct.contains(" d") && jct.contains("x)"), "{out}");
    assert!(!out.contains("e6"), "{out}");
    // Rows that do not apply are left out.
    assert!(
        !out.contains("deadlines met") && !out.contains("cluster efficiency"),
        "{out}"
    );
    assert!(out.contains("mean pending time"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("tiresias: mean JCT ") && l.contains("x lower than fifo")),
        "{out}"
    );
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<table class=\"cmp\">"));
    assert!(!html.contains("<pre>"), "the table is HTML, not text");
    for title in [
        "JCT CDF",
        "Pending time CDF",
        "GPU utilisation over time",
        "Queue length over time",
        "Running jobs over time",
    ] {
        assert!(
            html.contains(&format!(">{title}</text>")),
            "no chart '{title}'"
        );
    }
    // The Philly sample's VCs each get a chart.
    assert!(html.contains("JCT CDF in VC "), "no per-VC charts");
    // Axes in days, not raw seconds.
    assert!(html.contains(" d</text>"), "no axis in days");

    let Some(bin) = chromium() else { return };
    let dom = render(bin, &dir.join("report.html"), &shots().join("compare.png"));
    assert!(dom.contains("baseline"), "{dom}");
    assert!(dom.contains("class=\"ratio good\""), "{dom}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn tenants_and_identical_runs_are_in_the_report() {
    let dir = scratch("tenants");
    let d = dir.to_str().unwrap();
    let o = apiary(&[
        "compare",
        "-q",
        "-p",
        "private,quota,hived",
        "-c",
        "n48g8",
        "-o",
        d,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("anomaly"), "{out}");
    assert!(out.contains("gave identical results"), "{out}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<h2>Tenants</h2>"), "no tenants table");
    assert!(html.contains("anomaly jobs"), "no sharing anomaly");
    assert!(
        html.contains("gave identical results"),
        "no identical-results note"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sweep_report_has_a_table_and_charts_in_hours() {
    let dir = scratch("sweep");
    let d = dir.to_str().unwrap();
    let file = root().join("testdata/sweeps/philly-load.toml");
    let o = apiary(&["sweep", "run", file.to_str().unwrap(), "-o", d, "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let r = apiary(&["sweep", "report", d]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let out = text(&r.stdout);
    assert!(out.contains(" ± ") && out.contains(" h"), "{out}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<table class=\"cmp\">"));
    assert!(html.contains(">mean JCT against load"), "{html}");
    assert!(html.contains("x lower than fifo"), "{html}");
    let Some(bin) = chromium() else { return };
    let dom = render(bin, &dir.join("report.html"), &shots().join("sweep.png"));
    assert!(dom.contains("All configurations"), "{dom}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn getting_started_commands_say_what_they_did() {
    let dir = scratch("synth");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("synth.csv");
    let o = apiary(&[
        "trace",
        "synth",
        "--jobs",
        "200",
        "--gpus",
        "64",
        "--seed",
        "1",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("wrote {}: 200 jobs (seed 1)", out.display()))
            && err.contains("-c n8g8"),
        "{err}"
    );
    // Subcommands are described by their own help, not a neighbour's.
    let h = text(&apiary(&["hived", "--help"]).stdout);
    let line = |cmd: &str| {
        h.lines()
            .find(|l| l.trim_start().starts_with(cmd))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("status").contains("cell status"), "{h}");
    assert!(
        line("bench").contains("Time HiveD's scheduling decision"),
        "{h}"
    );
    assert!(!line("bench").contains("cell status"), "{h}");
    // The paper-style sweep plans to its 100 cells.
    let paper = root().join("testdata/sweeps/philly-paper.toml");
    let p = apiary(&["sweep", "plan", paper.to_str().unwrap()]);
    assert!(p.status.success(), "{}", text(&p.stderr));
    assert!(
        text(&p.stdout).starts_with(
            "philly-paper: 100 cells = 1 traces x 1 clusters x 5 loads x 4 settings x 5 seeds"
        ),
        "{}",
        text(&p.stdout)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// What a researcher reported missing from the terminal: why jobs were rejected, why
/// two policies matched, what a generator wrote, a near-miss cluster name, and HiveD's
/// cells in order.
#[test]
fn the_terminal_says_why() {
    let d = scratch("why");
    std::fs::create_dir_all(&d).unwrap();
    let t = d.join("ef.csv");
    // Every job at time 0 on two nodes: admission control turns most away.
    let o = apiary(&[
        "trace",
        "elasticflow",
        "--jobs",
        "40",
        "--seed",
        "3",
        "-o",
        t.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    assert!(text(&o.stderr).contains("wrote") && text(&o.stderr).contains("40 ElasticFlow jobs"));
    let o = apiary(&[
        "simulate",
        "-q",
        "-t",
        t.to_str().unwrap(),
        "-c",
        "n2g8",
        "-p",
        "elasticflow",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.lines().any(|l| l.starts_with("elasticflow: ")
            && l.contains("rejected: declined: its deadline cannot be met")),
        "{out}"
    );
    let o = apiary(&["compare", "-q", "-p", "private,hived", "-c", "n48g8"]);
    assert!(
        text(&o.stdout).contains("opportunistic jobs"),
        "{}",
        text(&o.stdout)
    );
    let o = apiary(&["simulate", "-c", "philli"]);
    assert!(text(&o.stderr).contains("did you mean 'philly'?"));
    let o = apiary(&[
        "hived",
        "status",
        root().join("testdata/hived/design.yaml").to_str().unwrap(),
    ]);
    let out = text(&o.stdout);
    let top: Vec<&str> = out
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| !l.starts_with(' '))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert!(top.len() > 3, "{out}");
    assert!(
        top.windows(2).all(|w| {
            let k =
                |s: &str| -> Vec<u64> { s.split(['/', '.']).map(|p| p.parse().unwrap()).collect() };
            k(w[0]) <= k(w[1])
        }),
        "{top:?}"
    );
}

/// Every report says how it was made: apiary's version and commit, and the date
/// (`SOURCE_DATE_EPOCH` fixes it); a sweep report also its manifest's SHA-256.
#[test]
fn reports_record_the_commit_and_the_date() {
    let d = scratch("made");
    let run = |args: &[&str]| {
        let o = Command::new(BIN)
            .args(args)
            .env("SOURCE_DATE_EPOCH", "1790000000")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    };
    let cmp = d.join("cmp");
    run(&[
        "compare",
        "-q",
        "-p",
        "fifo,srtf",
        "-o",
        cmp.to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(cmp.join("report.html")).unwrap();
    assert!(page.contains("(commit "), "no commit in the compare report");
    assert!(
        page.contains("2026-09-21 14:13:20 UTC"),
        "no date in the compare report"
    );
    // summary.json stays the same whenever it is made.
    let summary = std::fs::read_to_string(cmp.join("fifo-summary.json")).unwrap();
    assert!(summary.contains("\"commit\"") && !summary.contains("2026-09-21"));
    let sw = d.join("sweep");
    let toml = root().join("testdata/sweeps/philly-load.toml");
    run(&[
        "sweep",
        "run",
        toml.to_str().unwrap(),
        "-o",
        sw.to_str().unwrap(),
    ]);
    run(&["sweep", "report", sw.to_str().unwrap()]);
    let page = std::fs::read_to_string(sw.join("report.html")).unwrap();
    for want in [
        "How it was made",
        "(commit ",
        "2026-09-21 14:13:20 UTC",
        "manifest SHA-256",
    ] {
        assert!(page.contains(want), "sweep report lacks {want}");
    }
}

/// A sweep's charts stay readable when its settings differ by decades: such a chart
/// gets a log y axis, each metric also gets a chart relative to the baseline, every
/// chart's numbers are written beside its SVG, and `--figures pgf` adds each as a
/// pgfplots figure for papers.
#[test]
fn sweep_charts_span_decades_and_come_with_their_data() {
    let d = scratch("decades");
    let toml = root().join("testdata/sweeps/philly-load.toml");
    let sw = d.join("sweep");
    for args in [
        vec![
            "sweep",
            "run",
            toml.to_str().unwrap(),
            "-o",
            sw.to_str().unwrap(),
        ],
        vec![
            "sweep",
            "report",
            sw.to_str().unwrap(),
            "--baseline",
            "fifo",
            "--figures",
            "pgf",
        ],
    ] {
        let o = apiary(&args);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let charts = sw.join("charts");
    let tex = std::fs::read_to_string(charts.join("philly-sample-n32g8-pending_mean.tex")).unwrap();
    assert!(
        tex.contains("\\begin{tikzpicture}") && tex.contains("ymode=log"),
        "{tex}"
    );
    assert_eq!(tex.matches("\\addplot").count(), 3, "{tex}");
    assert!(
        charts
            .join("philly-sample-n32g8-pending_mean-relative.tex")
            .exists()
    );
    let pending =
        std::fs::read_to_string(charts.join("philly-sample-n32g8-pending_mean.svg")).unwrap();
    // FIFO waits days and Tiresias minutes: 46x apart.
    assert!(pending.contains("log scale"), "pending chart is linear");
    let rel = std::fs::read_to_string(charts.join("philly-sample-n32g8-pending_mean-relative.svg"))
        .unwrap();
    assert!(rel.contains("relative to fifo"));
    let data =
        std::fs::read_to_string(charts.join("philly-sample-n32g8-pending_mean.csv")).unwrap();
    let mut rows = data.lines();
    assert_eq!(rows.next(), Some("setting,load,mean,ci95_half_width"));
    assert_eq!(rows.count(), 15, "{data}");
    let data =
        std::fs::read_to_string(charts.join("philly-sample-n32g8-pending_mean-relative.csv"))
            .unwrap();
    assert!(data.lines().any(|l| l.starts_with("fifo,1,1,")), "{data}");
    let page = std::fs::read_to_string(sw.join("report.html")).unwrap();
    assert!(page.contains("relative to fifo"));
}

/// `compare --seeds N` repeats the comparison over seeds and reports means with
/// intervals and seed-paired ratios, as the sweep it writes would.
#[test]
fn compare_over_seeds_gives_intervals() {
    let d = scratch("seeds");
    let o = apiary(&[
        "compare",
        "-q",
        "-p",
        "fifo,srtf",
        "--seeds",
        "3",
        "--sample",
        "1000",
        "-c",
        "n16g8",
        "-o",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let fifo = out
        .lines()
        .find(|l| l.starts_with("philly-sample") && l.contains(" fifo "))
        .unwrap();
    assert!(fifo.contains(" 3 ") && fifo.contains('±'), "{out}");
    assert!(
        out.contains("srtf: mean JCT") && out.contains("over 3 seeds"),
        "{out}"
    );
    // The sweep file it ran is kept with -o, and runs again as written.
    let file = d.join("seeds/compare-seeds.toml");
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("sample = 1000")
    );
    let again = d.join("again");
    let o = apiary(&[
        "sweep",
        "run",
        "-q",
        file.to_str().unwrap(),
        "-o",
        again.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(again.join("results.csv")).unwrap(),
        std::fs::read_to_string(d.join("seeds/cells/results.csv")).unwrap()
    );
}

/// `compare -o` writes each chart of its report as SVG with its numbers as CSV, and with
/// `--figures pgf` as pgfplots; a second comparison leaves no chart of the first.
#[test]
fn compare_charts_come_as_files_for_papers() {
    let d = scratch("compare-figures");
    let out = d.to_str().unwrap();
    let o = apiary(&[
        "compare",
        "-q",
        "-p",
        "fifo,tiresias",
        "-o",
        out,
        "--figures",
        "pgf",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let charts = d.join("charts");
    for ext in ["svg", "csv", "tex"] {
        assert!(
            charts.join(format!("jct-cdf.{ext}")).exists(),
            "no jct-cdf.{ext}"
        );
    }
    let csv = std::fs::read_to_string(charts.join("jct-cdf.csv")).unwrap();
    assert!(csv.starts_with("line,seconds,fraction\nfifo,"), "{csv}");
    assert!(csv.lines().any(|l| l.starts_with("tiresias,")), "{csv}");
    let tex = std::fs::read_to_string(charts.join("utilisation.tex")).unwrap();
    assert!(tex.contains("ylabel={busy GPUs (\\%)}"), "{tex}");
    // The sample's VCs each get a chart; a run on a trace without VCs has none.
    assert!(charts.join("vc-103959-jct-cdf.svg").exists());
    let pollux = root().join("testdata/traces/pollux-workload-6.csv");
    let o = apiary(&[
        "compare",
        "-q",
        "-p",
        "fifo",
        "-t",
        pollux.to_str().unwrap(),
        "-o",
        out,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!charts.join("vc-103959-jct-cdf.svg").exists());
    assert!(!charts.join("jct-cdf.tex").exists());
    assert!(charts.join("jct-cdf.svg").exists());
}

/// Under `--carbon`, the report charts the jobs' emission over time (which adds up to
/// the summary's carbon) and the grid's intensity; under the constant default it does
/// not.
#[test]
fn carbon_over_time_is_charted_under_a_series() {
    let d = scratch("carbon-charts");
    let out = d.to_str().unwrap();
    let o = apiary(&[
        "compare",
        "-q",
        "-p",
        "fifo,carbon-pause",
        "--carbon",
        "CISO",
        "-o",
        out,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let charts = d.join("charts");
    let csv = std::fs::read_to_string(charts.join("carbon-emission.csv")).unwrap();
    let rows: Vec<(String, f64, f64)> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    let fifo: Vec<&(String, f64, f64)> = rows.iter().filter(|r| r.0 == "fifo").collect();
    let width_h = fifo[1].1 - fifo[0].1;
    let kg: f64 = fifo.iter().map(|r| r.2 * width_h).sum();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("fifo-summary.json")).unwrap())
            .unwrap();
    let carbon = summary["carbon_kg"].as_f64().unwrap();
    assert!((kg - carbon).abs() < 1e-6 * carbon, "{kg} against {carbon}");
    assert!(charts.join("carbon-intensity.svg").exists());
    let o = apiary(&["compare", "-q", "-p", "fifo", "-o", out]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!charts.join("carbon-emission.svg").exists());
}

#[test]
fn a_compare_under_failures_reports_goodput_and_draws_its_failures() {
    let dir = std::env::temp_dir().join(format!("apiary-failures-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = Command::new(BIN)
        .args(["compare", "-q", "-p", "fifo,tiresias", "--failures"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/failures-llama3x10.toml"
        ))
        .arg("-o")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for row in ["goodput", "GPU-hours lost to failures", "failures"] {
        assert!(out.lines().any(|l| l.starts_with(row)), "{row}: {out}");
    }
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("fifo-summary.json")).unwrap())
            .unwrap();
    let g = s["goodput"].as_f64().unwrap();
    assert!(g > 0.9 && g < 1.0, "{s}");
    assert!(s["failures"].as_u64().unwrap() > 100, "{s}");
    assert_eq!(s["failure_model"]["model"], "llama3x10");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for title in ["Failures so far", "GPUs down for repair over time"] {
        assert!(html.contains(title), "{title}");
    }
}

#[test]
fn a_disaggregated_run_reuses_prompts_on_its_prefill_pool() {
    // inference-perf's fixed prompts, sent again and again: with --prefix-cache the
    // prefill pool serves most prompt tokens from its caches, and every KV is sent.
    let json = |cache: bool| -> serde_json::Value {
        let mut a = vec![
            "llm",
            "simulate",
            "-q",
            "--json",
            "-t",
            "shared-prefix:2:2:64:448:16",
            "-n",
            "200",
            "--rate",
            "4",
            "--disagg",
            "2:2",
        ];
        if cache {
            a.push("--prefix-cache");
        }
        let o = apiary(&a);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if v.is_array() { v[0].clone() } else { v }
    };
    let (cold, warm) = (json(false), json(true));
    assert_eq!(warm["requests"], 200);
    assert_eq!(warm["kv_transfers"], cold["kv_transfers"]);
    let hit = warm["prefix_hit_rate"].as_f64().unwrap();
    assert!(hit > 0.9, "{warm}");
    assert!(
        warm["ttft_mean_s"].as_f64() < cold["ttft_mean_s"].as_f64(),
        "{warm} {cold}"
    );
}

#[test]
fn llm_compare_writes_a_report_like_the_training_ones() {
    let dir = scratch("llm-compare");
    let d = dir.to_str().unwrap();
    let run = || {
        apiary(&[
            "llm",
            "compare",
            "-q",
            "-n",
            "300",
            "-p",
            "round-robin,llumnix",
            "-o",
            d,
        ])
    };
    let o = run();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        !text(&o.stderr).contains("replacing"),
        "nothing was there to replace"
    );
    // summary.json: the record (the committed sample's digest) and both policies.
    let sum: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let sample = std::fs::read(root().join("testdata/llm/azure-conv-sample.csv")).unwrap();
    use sha2::Digest as _;
    let digest: String = sha2::Sha256::digest(&sample)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sum["record"]["trace"]["sha256"], digest.as_str());
    assert_eq!(sum["record"]["trace"]["jobs"], 300);
    assert_eq!(sum["record"]["options"]["instances"], "16");
    let runs = sum["runs"].as_array().unwrap();
    assert_eq!(
        (runs[0]["policy"].as_str(), runs[1]["policy"].as_str()),
        (Some("round-robin"), Some("llumnix"))
    );
    // A row per request, served ones with their instance and times.
    let csv = std::fs::read_to_string(dir.join("llumnix-requests.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 301, "a header and 300 requests");
    assert!(
        rows[0].starts_with("request,arrival_s,prompt_tokens,output_tokens,state,instance,ttft_s")
    );
    let served = rows[1..]
        .iter()
        .filter(|r| r.split(',').nth(4) == Some("done"))
        .count();
    assert_eq!(served as u64, runs[1]["requests"].as_u64().unwrap());
    // The page: HTML table with ratios, headlines, charts in seconds, the record; no
    // flat instances chart for a fixed cluster.
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<table class=\"cmp\">") && !html.contains("<pre>"));
    assert!(html.contains("<ul class=\"headlines\">") && html.contains("than round-robin"));
    assert!(
        html.contains("time to first token (s, log scale)"),
        "TTFT in seconds"
    );
    assert!(!html.contains("(ms"), "no axis in ms");
    assert!(
        !html.contains(">Instances</text>"),
        "a flat instances chart"
    );
    assert!(html.contains("<h2>The run</h2>") && html.contains(&digest));
    // A second run replaces the first's files, and says so even with -q.
    let o = run();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("replacing an earlier comparison"),
        "{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn llm_compare_over_seeds_gives_intervals_and_paired_ratios() {
    let dir = scratch("llm-seeds");
    let d = dir.to_str().unwrap();
    let o = apiary(&[
        "llm",
        "compare",
        "-q",
        "-n",
        "300",
        "--rate",
        "4",
        "-p",
        "round-robin,llumnix",
        "--seeds",
        "3",
        "-o",
        d,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.starts_with("3 seeds"), "{out}");
    let p99 = out.lines().find(|l| l.starts_with("TTFT p99")).unwrap();
    assert!(p99.contains(" ± ") && p99.contains("x ± "), "{p99}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("seeds.json")).unwrap()).unwrap();
    assert_eq!(v["seeds"], 3);
    let base = &v["policies"]["round-robin"]["ttft_p99_s"];
    let l = &v["policies"]["llumnix"]["ttft_p99_s"];
    assert_eq!(
        (base["seeds"].as_u64(), l["seeds"].as_u64()),
        (Some(3), Some(3))
    );
    assert!(
        base.get("ratio_mean").is_none(),
        "the baseline has no ratio to itself"
    );
    assert!(l["ratio_mean"].as_f64().unwrap() > 0.0 && l["ci95"].as_f64().unwrap() >= 0.0);
    let _ = std::fs::remove_dir_all(dir);
}
