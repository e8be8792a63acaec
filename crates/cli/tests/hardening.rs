//! The live service against a careless operator and a hostile job: jobs cannot see or
//! use the agent's token; agents killed or stopped and restarted never let a job run
//! twice at once; a server outage does not kill jobs; jobs run as the configured user;
//! a lost or damaged state is a clean startup error.

mod common;

use common::*;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_job_cannot_read_the_agents_token_nor_act_for_another_node() {
    let c = Cluster::with_auth("identity", "fifo", true);
    // The job prints its environment and its supervisor's command line and environment.
    let probe = "env; tr '\\0' ' ' < /proc/$PPID/cmdline; echo; tr '\\0' '\\n' < /proc/$PPID/environ; echo probe-done";
    let (code, v) = call(
        "POST",
        &c.url("/v1/jobs"),
        Some(TENANT_A),
        Some(json!({"gpus": 1, "command": ["sh", "-c", probe]})),
    );
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_u64().unwrap();
    let t0 = Instant::now();
    let out = loop {
        let j = c.job_as(id, ADMIN);
        if j["state"] == "succeeded" {
            break j["parts"][0]["output_tail"].as_str().unwrap().to_string();
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{j}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        out.contains("probe-done") && out.contains("APIARY_JOB_ID"),
        "{out}"
    );
    assert!(
        !out.contains(AGENT) && !out.contains("APIARY_TOKEN"),
        "{out}"
    );
    assert!(
        !out.contains("CARGO"),
        "the agent's environment leaked: {out}"
    );
    for n in ["n0", "n1"] {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", c.agent_pid(n))).unwrap();
        assert!(!String::from_utf8_lossy(&cmdline).contains(AGENT));
    }
    // A heartbeat for a node the token does not serve, or with a tenant's token: 403,
    // and no job's command comes back.
    let hb =
        |node: &str| json!({"node": node, "instance": "t", "gpus": 8, "running": [], "exited": []});
    let url = c.url("/v1/agents/heartbeat");
    let (code, v) = call("POST", &url, Some(AGENT_N0), Some(hb("n1")));
    assert_eq!(code, 403, "{v}");
    assert!(v.get("start").is_none(), "{v}");
    let (code, _) = call("POST", &url, Some(TENANT_A), Some(hb("n0")));
    assert_eq!(code, 403);
    let (code, _) = call("POST", &url, Some(METRICS), Some(hb("n0")));
    assert_eq!(code, 403);
}

#[test]
fn tenants_see_only_their_vc_in_nodes_and_metrics_need_a_metrics_token() {
    let c = Cluster::with_auth("views", "fifo", true);
    let (code, v) = call(
        "POST",
        &c.url("/v1/jobs"),
        Some(TENANT_A),
        Some(json!({"gpus": 2, "command": ["sleep", "30"]})),
    );
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_u64().unwrap();
    let t0 = Instant::now();
    while c.job_as(id, ADMIN)["state"] != "running" {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    let ids = |token: &str| -> Vec<u64> {
        let (_, nodes) = call("GET", &c.url("/v1/nodes"), Some(token), None);
        nodes
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| {
                n["jobs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|j| j.as_u64().unwrap())
            })
            .collect()
    };
    assert_eq!(ids(ADMIN), vec![id]);
    assert_eq!(ids(TENANT_A), vec![id]);
    assert!(ids(TENANT_B).is_empty());
    for (token, want) in [(TENANT_A, 403), (AGENT, 403), (METRICS, 200), (ADMIN, 200)] {
        let r = client()
            .get(&c.url("/metrics"))
            .header("Authorization", &format!("Bearer {token}"))
            .call()
            .unwrap();
        assert_eq!(r.status().as_u16(), want, "{token}");
    }
    // Trailing bytes after the JSON body: refused, nothing accepted.
    let mut r = client()
        .post(&c.url("/v1/jobs"))
        .header("Authorization", &format!("Bearer {TENANT_A}"))
        .content_type("application/json")
        .send(r#"{"gpus": 1, "command": ["true"]} {"gpus": 2}"#)
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.body_mut().read_json().unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("after the JSON value"),
        "{v}"
    );
    // A 1 MiB name (under the body limit): 413 naming the field.
    let (code, v) = call(
        "POST",
        &c.url("/v1/jobs"),
        Some(TENANT_A),
        Some(json!({"gpus": 1, "command": ["true"], "name": "x".repeat(900_000)})),
    );
    assert_eq!(
        (code, v["error"]["field"].as_str()),
        (413, Some("name")),
        "{v}"
    );
}

#[test]
fn agents_killed_or_stopped_and_restarted_never_run_a_job_twice() {
    let rounds: usize = std::env::var("APIARY_AGENT_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut c = Cluster::new("agentrestart", "fifo");
    let log = c.dir.join("runs.log");
    let mut accepted: Vec<u64> = Vec::new();
    let mut rng = 987654321u64;
    for round in 0..rounds {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let t0 = Instant::now();
        let busy_for = Duration::from_millis(300 + (rng >> 33) % 500);
        while t0.elapsed() < busy_for {
            let gpus = [2, 4, 8, 16][accepted.len() % 4];
            let body = json!({"gpus": gpus, "command": logged_job(&log, 0.4),
                              "restart": {"max_restarts": 100}});
            if let Ok(v) = c.submit(body) {
                accepted.push(v["id"].as_u64().unwrap());
            }
            std::thread::sleep(Duration::from_millis(60));
        }
        let node = ["n0", "n1"][(rng >> 20) as usize % 2];
        if round % 2 == 0 {
            c.kill_agent(node);
        } else {
            assert!(c.term_agent(node), "an agent stopped by SIGTERM exits 0");
        }
        std::thread::sleep(Duration::from_millis(30 + (rng >> 40) % 150));
        c.start_agent(node);
    }
    let jobs = c.wait_terminal(&accepted, Duration::from_secs(180));
    for j in &jobs {
        assert_eq!(j["state"], "succeeded", "{j}");
    }
    let runs = assert_no_overlap(&log);
    assert!(
        runs >= accepted.len(),
        "{runs} runs for {} jobs",
        accepted.len()
    );
    eprintln!(
        "{rounds} agent rounds, {} jobs, {runs} attempts logged, 0 overlapping",
        accepted.len()
    );
}

#[test]
fn jobs_keep_running_through_a_server_outage() {
    let mut c = Cluster::new("outage", "fifo");
    let log = c.dir.join("runs.log");
    let r = c
        .submit(json!({"gpus": 8, "command": logged_job(&log, 4.0)}))
        .unwrap();
    let id = r["id"].as_u64().unwrap();
    c.wait_running(id);
    std::thread::sleep(Duration::from_millis(300));
    // Longer than the node timeout plus the grace period (1.5 s + 0.3 s).
    c.kill_server();
    std::thread::sleep(Duration::from_millis(2500));
    c.start_server();
    let j = &c.wait_terminal(&[id], Duration::from_secs(30))[0];
    assert_eq!(
        (j["state"].as_str(), j["attempt"].as_u64()),
        (Some("succeeded"), Some(1)),
        "{j}"
    );
    assert_eq!(assert_no_overlap(&log), 1);
}

#[test]
fn jobs_run_as_the_configured_user() {
    if !is_root() {
        eprintln!("note: not root; --run-as needs a root agent, test skipped");
        return;
    }
    let mut c = Cluster::new("runas", "fifo");
    c.kill_agent("n1");
    c.replace_agent("n0", &["--run-as", "nobody"]);
    let r = c
        .submit(
            json!({"gpus": 8, "command": ["sh", "-c", "echo uid=$(id -u) home=$HOME user=$USER"]}),
        )
        .unwrap();
    let id = r["id"].as_u64().unwrap();
    let j = &c.wait_terminal(&[id], Duration::from_secs(20))[0];
    let out = j["parts"][0]["output_tail"].as_str().unwrap();
    assert!(
        out.contains("uid=65534") && out.contains("user=nobody"),
        "{out}"
    );
    // A root agent with neither --run-as nor --allow-root-jobs runs a job as its VC's
    // account or refuses it: crates/cli/tests/tenants.rs.
}

/// Runs `apiary serve` on the cluster's config; returns (exit success, stderr), or
/// `None` if it is still serving after a few seconds (it was then killed).
fn serve_once(c: &Cluster, extra: &[&str]) -> Option<(bool, String)> {
    let mut s = Command::new(BIN)
        .args(["serve", "-c"])
        .arg(c.dir.join("server.toml"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Some(st) = s.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read as _;
            s.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return Some((st.success(), err));
        }
        if client().get(&c.url("/v1/cluster")).call().is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = s.kill();
    let _ = s.wait();
    None
}

#[test]
fn a_lost_or_damaged_state_is_a_clean_startup_error() {
    let mut c = Cluster::new("state", "fifo");
    let r = c
        .submit(json!({"gpus": 1, "name": "keep-me-please", "command": ["true"]}))
        .unwrap();
    c.wait_terminal(&[r["id"].as_u64().unwrap()], Duration::from_secs(20));
    c.kill_server();
    let data = c.dir.join("data");
    let state = data.join("state.redb");
    assert!(
        data.join("apiary-data.toml").exists(),
        "the data directory is marked"
    );
    let good = std::fs::read(&state).unwrap();
    let refused = |c: &Cluster, want: &str| {
        let (ok, err) = serve_once(c, &[]).expect("the server must refuse to start");
        assert!(!ok, "{err}");
        assert!(err.contains("state.redb") && err.contains(want), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    // Empty, missing: refused, pointing to --init.
    std::fs::write(&state, b"").unwrap();
    refused(&c, "--init");
    std::fs::remove_file(&state).unwrap();
    refused(&c, "--init");
    // Damaged bytes: refused, naming the file.
    // (Every copy of the record: redb keeps earlier versions in pages it may reuse.)
    let mut bad = good.clone();
    let mut found = 0;
    for at in 0..bad.len().saturating_sub(14) {
        if &bad[at..at + 14] == b"keep-me-please" {
            bad[at..at + 4].copy_from_slice(b"LOST");
            found += 1;
        }
    }
    assert!(found > 0, "the record is in the file");
    std::fs::write(&state, &bad).unwrap();
    refused(&c, "");
    // Damage at each page: a refusal or a start, never a panic printed on the way.
    for at in (4096..good.len()).step_by(4096) {
        let mut bad = good.clone();
        for b in &mut bad[at..(at + 64).min(good.len())] {
            *b ^= 0xFF;
        }
        std::fs::write(&state, &bad).unwrap();
        if let Some((ok, err)) = serve_once(&c, &[]) {
            assert!(!ok && err.contains("state.redb"), "page at {at}: {err}");
            assert!(
                !err.contains("panicked") && !err.contains("backtrace"),
                "page at {at}: {err}"
            );
        }
    }
    let mut cut = good.clone();
    cut.truncate(good.len() / 3);
    std::fs::write(&state, &cut).unwrap();
    if let Some((ok, err)) = serve_once(&c, &[]) {
        assert!(
            !ok && err.contains("state.redb") && !err.contains("panicked"),
            "{err}"
        );
    }
    // --init never overwrites a state that is there; it starts fresh where none is.
    std::fs::write(&state, &good).unwrap();
    let (ok, err) = serve_once(&c, &["--init"]).expect("refused");
    assert!(!ok && err.contains("move it away"), "{err}");
    std::fs::remove_file(&state).unwrap();
    assert!(
        serve_once(&c, &["--init"]).is_none(),
        "--init starts the server"
    );
    // The good state back: every job is still there.
    std::fs::write(&state, &good).unwrap();
    c.start_server();
    let j = c.job(r["id"].as_u64().unwrap());
    assert_eq!(j["spec"]["name"], "keep-me-please");
}

#[test]
fn a_stop_reaches_the_job_once_though_it_is_sent_to_the_whole_group() {
    // The agent stops an attempt with SIGTERM to its group, the supervisor included;
    // the job must get it once: a trap that saves a checkpoint runs once.
    let dir = std::env::temp_dir().join(format!("apiary-term-once-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The trap does not exit, so the job would see a second SIGTERM.
    let script = "trap 'echo saved >> terms' TERM; echo up > ready; while :; do sleep 0.05; done";
    use std::os::unix::process::CommandExt as _;
    let mut sup = Command::new(env!("CARGO_BIN_EXE_apiary"))
        .args(["job-exec", "--grace-ms", "1000", "--", "sh", "-c", script])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let wait_for = |name: &str| {
        let t0 = Instant::now();
        while !dir.join(name).exists() {
            assert!(t0.elapsed() < Duration::from_secs(10), "no {name}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let kill = |args: &[&str]| assert!(Command::new("kill").args(args).status().unwrap().success());
    wait_for("ready");
    // The supervisor is held until the job has run its trap, so that anything the
    // supervisor sent on would come as a second signal rather than merge with the first.
    let (pid, group) = (sup.id().to_string(), format!("-{}", sup.id()));
    kill(&["-STOP", &pid]);
    kill(&["-TERM", "--", &group]);
    wait_for("terms");
    kill(&["-CONT", &pid]);
    // The job ignores the stop, so the supervisor kills it after its grace.
    let code = sup.wait().unwrap();
    assert_eq!(code.code(), Some(128 + 9), "{code:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("terms")).unwrap(),
        "saved\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
