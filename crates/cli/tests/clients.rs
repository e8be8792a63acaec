//! The live clients as Slurm and kubectl users expect them, through the real binary on
//! loopback: TIME is run time frozen at the end, `jobs -a` has ELAPSED and EXIT, history
//! times read as local date-times, `-o` is checked (wide, json, yaml; an unknown value
//! lists the valid ones; commands without output take none), `vcs` lists `default`,
//! the metrics show an empty queue as 0, `/` leads to the dashboard, and the server's
//! log is timestamped with nodes' comings and goings.

mod common;

use common::*;
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn clients_read_like_squeue_sacct_and_kubectl() {
    let c = Cluster::new("clients", "fifo");
    let ok = c
        .submit(json!({"gpus": 1, "name": "quick", "command": sh("sleep 1.2")}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    let bad = c
        .submit(json!({"gpus": 1, "name": "bad", "command": sh("exit 3")}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    c.wait_terminal(&[ok, bad], Duration::from_secs(20));

    // TIME is the time it ran (about 1.2 s), and it stays so once the job ended.
    let time_of = |table: &str, id: u64| -> Vec<String> {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
            .unwrap_or_else(|| panic!("no job {id} in:\n{table}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let a = out(&cli(&c, &["jobs", "-a"]));
    let head: Vec<&str> = a.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        head,
        [
            "JOBID",
            "VC",
            "NAME",
            "USER",
            "STATE",
            "GPUS",
            "TIME",
            "ELAPSED",
            "EXIT",
            "NODES(REASON)"
        ],
        "{a}"
    );
    let row = time_of(&a, ok);
    assert_eq!(&row[1..5], ["default", "quick", "-", "succeeded"], "{a}");
    assert!(row[6] == "0:01" || row[6] == "0:02", "TIME {}: {a}", row[6]);
    assert_eq!(row[8], "0", "{a}");
    assert_eq!(time_of(&a, bad)[8], "3", "{a}");
    std::thread::sleep(Duration::from_millis(1100));
    let later = out(&cli(&c, &["jobs", "-a"]));
    assert_eq!(
        time_of(&later, ok)[6],
        row[6],
        "TIME kept counting:\n{later}"
    );

    // History in local date-times with ages; -o json keeps unix ms.
    let j = out(&cli(&c, &["job", &ok.to_string()]));
    let stamped = j
        .lines()
        .filter(|l| {
            let b = l.as_bytes();
            b.len() > 19 && b[4] == b'-' && b[7] == b'-' && b[10] == b' ' && b[13] == b':'
        })
        .count();
    assert!(stamped >= 3, "{j}");
    assert!(j.contains(" ago"), "{j}");
    let js: serde_json::Value =
        serde_json::from_str(&out(&cli(&c, &["job", &ok.to_string(), "-o", "json"]))).unwrap();
    assert!(js["submitted_ms"].as_u64().unwrap() > 1_700_000_000_000);

    // -o yaml parses to the same record; wide adds columns; a bad value lists the good.
    let y = out(&cli(&c, &["job", &ok.to_string(), "-o", "yaml"]));
    let yv: serde_json::Value = serde_saphyr::from_str(&y).unwrap();
    assert_eq!(yv["id"], js["id"]);
    assert_eq!(yv["history"], js["history"]);
    let w = out(&cli(&c, &["jobs", "-a", "-o", "wide"]));
    assert!(w.lines().next().unwrap().contains("SUBMITTED"), "{w}");
    let e = cli(&c, &["jobs", "-o", "bogus"]);
    assert!(!e.status.success());
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(
        err.contains("table")
            && err.contains("wide")
            && err.contains("json")
            && err.contains("yaml"),
        "{err}"
    );
    let e = cli(&c, &["cordon", "n0", "-o", "json"]);
    assert!(!e.status.success(), "cordon took -o");

    // The default VC is listed once jobs sit in it.
    let v = out(&cli(&c, &["vcs"]));
    assert!(v.lines().any(|l| l.starts_with("default ")), "{v}");

    // An empty queue is a 0 sample, not no data.
    let m = client()
        .get(&c.url("/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(m.contains("apiary_queue_length{vc=\"default\"} 0"), "{m}");

    // `/` leads to the dashboard.
    let no_follow = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .build(),
    );
    let r = no_follow.get(&c.url("/")).call().unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers().get("location").unwrap(), "/ui");

    // The log: timestamped lines, and nodes coming up as their own events.
    let t0 = Instant::now();
    let log = loop {
        let log = std::fs::read_to_string(c.dir.join("server.log")).unwrap();
        if log.contains("node n1 up") || t0.elapsed() > Duration::from_secs(5) {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        log.contains("apiary serve: node n0 up: first heartbeat"),
        "{log}"
    );
    for line in log.lines().filter(|l| l.contains("apiary serve:")) {
        let b = line.as_bytes();
        assert!(
            b.len() > 24 && b[4] == b'-' && b[10] == b'T' && b[23] == b'Z',
            "no timestamp: {line}"
        );
    }
}

#[test]
fn submit_waits_for_the_exit_code_and_jobs_watch_redraws() {
    let c = Cluster::new("wait", "fifo");
    let ok = cli(&c, &["submit", "--wait", "--", "sh", "-c", "sleep 0.3"]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        String::from_utf8_lossy(&ok.stderr).contains("succeeded after"),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let bad = cli(&c, &["submit", "--wait", "--", "sh", "-c", "exit 7"]);
    assert_eq!(bad.status.code(), Some(7));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("failed after"));

    // --watch prints the list again until stopped.
    let mut w = Command::new(BIN)
        .args(["jobs", "-a", "--watch", "0.3"])
        .env("APIARY_SERVER", c.url(""))
        .env("APIARY_CONFIG", c.dir.join("no-client.toml"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    w.kill().unwrap();
    let o = w.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.matches("Every 0.3 s: apiary jobs").count() >= 2,
        "{text}"
    );
    assert!(text.matches("JOBID").count() >= 2, "{text}");
    let e = cli(&c, &["jobs", "--watch", "0"]);
    assert!(!e.status.success());

    // Why a job waits: in the list, the job's page, the API and the dashboard's queues.
    let hold = c
        .submit(json!({"gpus": 8, "command": sh("sleep 5")}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    c.wait_running(hold);
    let big = c
        .submit(json!({"gpus": 16, "command": sh("true")}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    let list = out(&cli(&c, &["jobs"]));
    let row = list
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{big} ")))
        .unwrap();
    assert!(row.ends_with("(Resources)"), "{list}");
    assert!(out(&cli(&c, &["job", &big.to_string()])).contains("waiting  Resources"));
    assert_eq!(c.job(big)["reason"], "Resources");
    assert_eq!(c.job(hold).get("reason"), None);
    let ui = client()
        .get(&c.url("/ui"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(ui.contains("Resources</span>"), "{ui}");
    for id in [big, hold] {
        out(&cli(&c, &["cancel", &id.to_string()]));
    }
}

#[test]
fn a_job_runs_where_it_was_submitted_with_the_submitters_environment() {
    let c = Cluster::new("export", "fifo");
    let here = c.dir.join("here");
    std::fs::create_dir_all(&here).unwrap();
    let probe =
        "echo \"${FOO:-unset}|$(pwd)|${APIARY_FOO:-unset}|${APIARY_JOB_ID:-unset}\" > probe";
    let run = |args: &[&str]| {
        let o = Command::new(BIN)
            .arg("submit")
            .args(args)
            .args(["--wait", "--", "sh", "-c", probe])
            .current_dir(&here)
            .env("APIARY_SERVER", c.url(""))
            .env("APIARY_CONFIG", c.dir.join("no-client.toml"))
            .env("FOO", "bar")
            .env("APIARY_FOO", "from-the-submitter")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    // Defaults: the submitter's directory and exported variables, less APIARY_*.
    run(&[]);
    let got = std::fs::read_to_string(here.join("probe")).unwrap();
    let f: Vec<&str> = got.trim().split('|').collect();
    assert_eq!(f[0], "bar", "{got}");
    assert_eq!(
        std::fs::canonicalize(f[1]).unwrap(),
        std::fs::canonicalize(&here).unwrap()
    );
    assert_eq!(f[2], "unset", "{got}");
    assert_ne!(f[3], "unset", "{got}");
    // --export=NONE and --chdir.
    let other = c.dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    run(&["--export=NONE", "--chdir", other.to_str().unwrap()]);
    let got = std::fs::read_to_string(other.join("probe")).unwrap();
    assert!(got.starts_with("unset|"), "{got}");
}

#[test]
fn a_job_past_its_time_limit_is_stopped_and_fails_with_timeout() {
    let c = Cluster::new("timeout", "fifo");
    let t0 = Instant::now();
    let o = cli(
        &c,
        &["submit", "--time", "0:01", "--wait", "--", "sleep", "30"],
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "it ran to its end");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("failed after") && err.contains("(exit timeout)"),
        "{err}"
    );
    let list = out(&cli(&c, &["jobs", "-a"]));
    assert!(list.lines().nth(1).unwrap().contains(" timeout"), "{list}");
    let j = c.job(1);
    assert_eq!(
        j["history"].as_array().unwrap().last().unwrap()["event"],
        "timeout"
    );
    assert_eq!(j["spec"]["time_limit_s"], 1.0);
    // A limit that is no time at all is refused by the client.
    let bad = cli(&c, &["submit", "--time", "soon", "--", "true"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--time 'soon'"));
}

#[test]
fn dependencies_and_arrays_as_sbatch_has_them() {
    let c = Cluster::new("deps", "fifo");
    let dir = c.dir.join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let first = id_of(&cli(
        &c,
        &["submit", "--chdir", d, "--", "sh", "-c", "sleep 0.5"],
    ));
    let after = id_of(&cli(
        &c,
        &[
            "submit",
            "--chdir",
            d,
            "--dependency",
            &format!("afterok:{first}"),
            "--",
            "true",
        ],
    ));
    let j = c.job(after);
    assert_eq!(j["state"], "queued");
    assert_eq!(j["reason"], "Dependency", "{j}");
    let done = c.wait_terminal(&[first, after], Duration::from_secs(20));
    assert_eq!(done[1]["state"], "succeeded");
    let at = |j: &serde_json::Value, ev: &str| {
        j["history"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["event"] == ev)
            .map(|t| t["at_ms"].as_u64().unwrap())
            .unwrap()
    };
    assert!(at(&done[1], "running") >= at(&done[0], "succeeded"));
    // A failed dependency cancels the job that waits for it.
    let bad = id_of(&cli(&c, &["submit", "--", "sh", "-c", "sleep 0.3; exit 1"]));
    let orphan = id_of(&cli(
        &c,
        &["submit", "-d", &format!("afterok:{bad}"), "--", "true"],
    ));
    let done = c.wait_terminal(&[bad, orphan], Duration::from_secs(20));
    assert_eq!(done[1]["state"], "cancelled");

    // An array of 4 tasks, at most 2 at once: each sees its index.
    let o = cli(
        &c,
        &[
            "submit",
            "--chdir",
            d,
            "--array",
            "0-3%2",
            "--wait",
            "--",
            "sh",
            "-c",
            "echo \"$APIARY_ARRAY_TASK_ID $APIARY_ARRAY_TASK_COUNT $(date +%s%N)\" > start.$APIARY_ARRAY_TASK_ID; \
         sleep 0.4; date +%s%N > end.$APIARY_ARRAY_TASK_ID",
        ],
    );
    let text = out(&o);
    assert!(text.starts_with("Submitted array of 4 jobs: "), "{text}");
    let mut spans = Vec::new();
    for t in 0..4 {
        let s = std::fs::read_to_string(dir.join(format!("start.{t}"))).unwrap();
        let f: Vec<&str> = s.split_whitespace().collect();
        assert_eq!((f[0], f[1]), (t.to_string().as_str(), "4"), "{s}");
        let end: u128 = std::fs::read_to_string(dir.join(format!("end.{t}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        spans.push((f[2].parse::<u128>().unwrap(), end));
    }
    for &(s, _) in &spans {
        let at_once = spans.iter().filter(|&&(a, b)| a <= s && s < b).count();
        assert!(at_once <= 2, "{at_once} tasks at once: {spans:?}");
    }
    let list = out(&cli(&c, &["jobs", "-a"]));
    assert!(list.contains("sh[3]"), "{list}");
}

#[test]
fn logs_follow_a_running_job() {
    use std::io::Read as _;
    let c = Cluster::new("follow", "fifo");
    let id = c
        .submit(
            json!({"gpus": 1, "command": sh("echo first; sleep 1.5; echo second >&2; echo third")}),
        )
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    c.wait_running(id);
    let mut f = Command::new(BIN)
        .args(["logs", "-f", &id.to_string()])
        .env("APIARY_SERVER", c.url(""))
        .env("APIARY_CONFIG", c.dir.join("no-client.toml"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = f.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = String::new();
        let mut buf = [0u8; 256];
        let mut first_at = None;
        loop {
            let n = pipe.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if first_at.is_none() && seen.contains("first") {
                first_at = Some(Instant::now());
            }
        }
        (seen, first_at)
    });
    // While it runs, plain `logs` shows what arrived so far.
    let t0 = Instant::now();
    let so_far = loop {
        let o = out(&cli(&c, &["logs", &id.to_string()]));
        if o.contains("first") || t0.elapsed() > Duration::from_secs(5) {
            break o;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        so_far.contains("first") && !so_far.contains("third"),
        "{so_far}"
    );
    let status = f.wait().unwrap();
    let done_at = Instant::now();
    let (seen, first_at) = reader.join().unwrap();
    assert!(status.success());
    assert_eq!(seen, "first\nsecond\nthird\n");
    // "first" came out while the job still ran, well before the end.
    assert!(
        done_at - first_at.unwrap() > Duration::from_millis(700),
        "not followed live"
    );
    assert_eq!(c.job(id)["state"], "succeeded");
}
