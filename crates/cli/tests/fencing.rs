//! Node identity and self-fencing, on the real binary: two agents claiming one node
//! never both run its jobs, a stopped or cut-off agent's jobs are dead before the
//! server runs them elsewhere, a process that calls `setsid` ends with its attempt, and
//! the agent's log is timestamped and quiet through an outage.

mod common;

use common::*;
use serde_json::json;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Waits for a child to exit, at most `limit`.
fn exits_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

/// An agent for `node` with logs and state of its own (another host's, say).
fn other_agent(c: &Cluster, node: &str, tag: &str, extra: &[&str]) -> (Child, std::path::PathBuf) {
    let err = c.dir.join(format!("agent-{tag}.log"));
    let child = Command::new(BIN)
        .args([
            "agent",
            "--server",
            &c.url(""),
            "--node",
            node,
            "--gpus",
            "8",
        ])
        .arg("--allow-root-jobs")
        .args(extra)
        .arg("--logs")
        .arg(c.dir.join(format!("logs-{tag}")))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    (child, err)
}

/// Waits until job `id` runs in an attempt after `attempt`; returns its node.
fn wait_rerun(c: &Cluster, id: u64, attempt: u64, limit: Duration) -> String {
    let t0 = Instant::now();
    loop {
        let j = c.job(id);
        if j["state"] == "running" && j["attempt"].as_u64() > Some(attempt) {
            return j["parts"][0]["node"].as_str().unwrap().to_string();
        }
        assert!(t0.elapsed() < limit, "job {id} not rerun: {j}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_second_agent_for_a_node_is_refused_and_replace_fences_the_first() {
    let mut c = Cluster::new("dupnode", "fifo");
    let log = c.dir.join("runs.log");
    let id = c
        .submit(json!({"gpus": 8, "command": logged_job(&log, 4.0)}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    let node = c.wait_running(id);
    std::thread::sleep(Duration::from_millis(300));
    let first = c.agent_pid(&node);

    // A cloned host: same node name, its own logs and state.
    let (mut dup, err) = other_agent(&c, &node, "dup", &[]);
    let st = exits_within(&mut dup, Duration::from_secs(10)).expect("the duplicate stops");
    assert!(!st.success());
    let said = std::fs::read_to_string(&err).unwrap();
    assert!(
        said.contains("is served by agent instance") && said.contains(&format!("{first}@")),
        "{said}"
    );
    assert!(said.contains("--replace"), "{said}");
    let nodes = call("GET", &c.url("/v1/nodes"), None, None).1;
    let n = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node.as_str())
        .unwrap();
    assert_eq!(
        n["health"], "up",
        "the refused duplicate marked nothing down: {n}"
    );
    assert_eq!(c.job(id)["attempt"], 1);

    // --replace: the first agent is fenced, kills its job and stops.
    let (replacement, err2) = other_agent(&c, &node, "replace", &["--replace"]);
    let i = c.agents.iter().position(|a| a.0 == node).unwrap();
    let (_, mut old) = c.agents.remove(i);
    c.agents.push((node.clone(), replacement));
    let st = exits_within(&mut old, Duration::from_secs(10)).expect("the fenced agent stops");
    assert!(!st.success());
    let old_log = std::fs::read_to_string(c.dir.join(format!("agent-{node}.log"))).unwrap();
    assert!(old_log.contains("fenced"), "{old_log}");
    let j = &c.wait_terminal(&[id], Duration::from_secs(30))[0];
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(j["attempt"], 2, "the fenced attempt ran again: {j}");
    assert_eq!(assert_no_overlap(&log), 2);
    let _ = err2;
}

#[test]
fn a_stopped_agents_jobs_are_dead_before_they_run_elsewhere() {
    let c = Cluster::new("sigstop", "fifo");
    let log = c.dir.join("runs.log");
    let id = c
        .submit(json!({"gpus": 8, "command": logged_job(&log, 5.0)}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    let node = c.wait_running(id);
    std::thread::sleep(Duration::from_millis(300));
    let pid = c.agent_pid(&node).to_string();
    Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    let elsewhere = wait_rerun(&c, id, 1, Duration::from_secs(15));
    assert_ne!(elsewhere, node);
    std::thread::sleep(Duration::from_millis(500));
    Command::new("kill").args(["-CONT", &pid]).status().unwrap();
    let j = &c.wait_terminal(&[id], Duration::from_secs(30))[0];
    assert_eq!(j["state"], "succeeded", "{j}");
    // The first attempt ended (its lease ran out) before the second started.
    assert_eq!(assert_no_overlap(&log), 2);
    let out =
        std::fs::read_to_string(c.dir.join(format!("logs-{node}/{id}-1.out"))).unwrap_or_default();
    assert!(out.contains("lease ran out"), "{out}");
}

/// A TCP relay to the server that can be cut: while cut, it holds every connection
/// and forwards nothing, as a network partition does.
struct Relay {
    port: u16,
    cut: Arc<AtomicBool>,
}

fn relay(to: u16) -> Relay {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let cut = Arc::new(AtomicBool::new(false));
    let flag = cut.clone();
    std::thread::spawn(move || {
        for inbound in l.incoming().flatten() {
            let Ok(outbound) = TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            for (mut from, mut into) in [
                (inbound.try_clone().unwrap(), outbound.try_clone().unwrap()),
                (outbound, inbound),
            ] {
                let flag = flag.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 << 10];
                    loop {
                        let n = match from.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        while flag.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        if into.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    Relay { port, cut }
}

#[test]
fn an_agent_cut_off_from_the_server_stops_its_jobs_before_they_run_elsewhere() {
    let mut c = Cluster::new("partition", "fifo");
    let log = c.dir.join("runs.log");
    // SIGTERM before the agent set up its handlers would kill it outright.
    std::thread::sleep(Duration::from_millis(500));
    assert!(c.term_agent("n0"));
    let r = relay(c.port);
    c.start_agent_at(
        "n0",
        &format!("http://127.0.0.1:{}", r.port),
        &["--allow-root-jobs"],
    );
    // The job goes to n0, behind the relay.
    assert_eq!(
        call("POST", &c.url("/v1/nodes/n1/cordon"), None, None).0,
        204
    );
    let id = c
        .submit(json!({"gpus": 8, "command": logged_job(&log, 5.0)}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    assert_eq!(c.wait_running(id), "n0");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        call("POST", &c.url("/v1/nodes/n1/uncordon"), None, None).0,
        204
    );
    r.cut.store(true, Ordering::SeqCst);
    assert_eq!(wait_rerun(&c, id, 1, Duration::from_secs(15)), "n1");
    std::thread::sleep(Duration::from_millis(500));
    r.cut.store(false, Ordering::SeqCst);
    let j = &c.wait_terminal(&[id], Duration::from_secs(30))[0];
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(assert_no_overlap(&log), 2);
}

#[test]
fn an_agent_logs_with_timestamps_says_an_outage_once_and_stops_promptly_without_the_server() {
    let mut c = Cluster::new("agentlog", "fifo");
    let id = c
        .submit(json!({"gpus": 8, "command": ["sleep", "60"]}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    let node = c.wait_running(id);
    std::thread::sleep(Duration::from_millis(300));
    c.kill_server();
    // Heartbeats fail about 10 times a second for 3 s.
    std::thread::sleep(Duration::from_secs(3));
    let t0 = Instant::now();
    assert!(c.term_agent(&node), "a stopped agent exits 0");
    // Its job's grace is 0.3 s: it stops within about that, not after retries.
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t0.elapsed()
    );
    let log = std::fs::read_to_string(c.dir.join(format!("agent-{node}.log"))).unwrap();
    for line in log.lines().filter(|l| !l.is_empty()) {
        let b = line.as_bytes();
        assert!(
            b.len() > 24 && b[4] == b'-' && b[10] == b'T' && b[23] == b'Z',
            "not stamped: {line}"
        );
    }
    let outage = log
        .lines()
        .filter(|l| l.contains("failed heartbeats"))
        .count();
    assert_eq!(outage, 1, "{log}");
}

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            != Some("Z")
    })
}

fn pid_in(file: &std::path::Path) -> u32 {
    let t0 = Instant::now();
    loop {
        if let Some(p) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no {}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_process_that_calls_setsid_does_not_outlive_its_attempt() {
    let c = Cluster::new("setsid", "fifo");
    let escapee = |f: &std::path::Path, then: &str| {
        sh(&format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 300' & {then}",
            f.display()
        ))
    };
    // The job's main process exits, leaving a process in a session of its own.
    let f1 = c.dir.join("one.pid");
    let id = c
        .submit(json!({"gpus": 8, "command": escapee(&f1, "sleep 0.5")}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    let j = &c.wait_terminal(&[id], Duration::from_secs(20))[0];
    assert_eq!(j["state"], "succeeded", "{j}");
    let p1 = pid_in(&f1);
    assert!(!alive(p1), "the setsid process {p1} outlived its job");
    // A cancelled job's escapee goes too.
    let f2 = c.dir.join("two.pid");
    let id = c
        .submit(json!({"gpus": 8, "command": escapee(&f2, "sleep 300")}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    c.wait_running(id);
    let p2 = pid_in(&f2);
    let (code, _) = call("POST", &c.url(&format!("/v1/jobs/{id}/cancel")), None, None);
    assert!(code < 300);
    let t0 = Instant::now();
    while alive(p2) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the setsid process {p2} outlived its cancel"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
