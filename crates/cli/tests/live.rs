//! End to end on loopback: `apiary serve` and two `apiary agent`s declaring 8 GPUs each
//! run real short commands; an agent killed mid-job has its job requeued elsewhere; the
//! server killed with SIGKILL under a steady submission load loses no accepted job and
//! never runs one job twice at the same time.

mod common;

use common::*;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn jobs_run_to_completion_on_two_agents() {
    let c = Cluster::new("run", "fifo");
    let out = c.dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let o = out.display();
    let mut ids = Vec::new();
    for (gpus, script) in [
        (
            4,
            format!("echo $CUDA_VISIBLE_DEVICES > {o}/a.$APIARY_NODE_RANK"),
        ),
        (8, format!("sleep 0.3; echo ok > {o}/b")),
        (
            16,
            format!("echo $APIARY_NODE_RANK/$APIARY_NUM_NODES > {o}/c.$APIARY_NODE_RANK"),
        ),
        (1, "exit 3".to_string()),
    ] {
        let r = c
            .submit(json!({"gpus": gpus, "command": sh(&script)}))
            .unwrap();
        assert!(
            matches!(r["state"].as_str(), Some("queued" | "running")),
            "{r}"
        );
        ids.push(r["id"].as_u64().unwrap());
    }
    let jobs = c.wait_terminal(&ids, Duration::from_secs(30));
    let states: Vec<&str> = jobs.iter().map(|j| j["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["succeeded", "succeeded", "succeeded", "failed"]);
    let a = std::fs::read_to_string(out.join("a.0")).unwrap();
    assert_eq!(a.trim().split(',').count(), 4, "4 GPUs visible: {a}");
    assert_eq!(
        std::fs::read_to_string(out.join("c.0")).unwrap().trim(),
        "0/2"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("c.1")).unwrap().trim(),
        "1/2"
    );
    assert_eq!(jobs[2]["parts"].as_array().unwrap().len(), 2);
    let last = jobs[3]["history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["event"], "failed");
    assert!(last["detail"].as_str().unwrap().contains("=3"), "{last}");
    // Output is captured per attempt.
    let logs: Vec<_> = ["n0", "n1"]
        .iter()
        .flat_map(|n| std::fs::read_dir(c.dir.join(format!("logs-{n}"))).unwrap())
        .collect();
    assert!(logs.len() >= 5);
}

#[test]
fn bad_requests_get_a_clear_4xx_and_change_nothing() {
    let c = Cluster::new("bad", "fifo");
    let cases = [
        (json!({"gpus": 0, "command": ["true"]}), 400, Some("gpus")),
        (json!({"gpus": 17, "command": ["true"]}), 400, Some("gpus")),
        (json!({"gpus": -1, "command": ["true"]}), 400, Some("gpus")),
        (json!({"gpus": 1, "command": []}), 400, Some("command")),
        (
            json!({"gpus": 1, "command": ["true"], "colour": "red"}),
            400,
            None,
        ),
        (json!({"command": ["true"]}), 400, None),
    ];
    for (body, code, field) in cases {
        let (got, v) = c.submit(body.clone()).unwrap_err();
        assert_eq!(got, code, "{body}: {v}");
        if let Some(f) = field {
            assert_eq!(v["error"]["field"], f, "{body}: {v}");
        }
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    }
    let mut r = client()
        .post(&c.url("/v1/jobs"))
        .content_type("application/json")
        .send("{not json")
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.body_mut().read_json().unwrap();
    assert!(v["error"]["message"].is_string());
    let r = client().get(&c.url("/v1/jobs/999")).call().unwrap();
    assert_eq!(r.status().as_u16(), 404);
    // Over the body limit: 413, or the server closes the connection while the client
    // is still sending.
    let big = "x".repeat(2 << 20);
    if let Ok(r) = client()
        .post(&c.url("/v1/jobs"))
        .content_type("application/json")
        .send(big.as_str())
    {
        assert_eq!(r.status().as_u16(), 413);
    }
    let list: Vec<Value> = client()
        .get(&c.url("/v1/jobs"))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    assert!(list.is_empty(), "nothing was accepted: {list:?}");
}

#[test]
fn a_killed_agent_requeues_its_job_which_finishes_elsewhere() {
    let mut c = Cluster::new("agentkill", "fifo");
    let r = c
        .submit(json!({"gpus": 8, "command": sh("sleep 1.5")}))
        .unwrap();
    let id = r["id"].as_u64().unwrap();
    let node = c.wait_running(id);
    std::thread::sleep(Duration::from_millis(300));
    c.kill_agent(&node);
    let j = &c.wait_terminal(&[id], Duration::from_secs(30))[0];
    assert_eq!(j["state"], "succeeded", "{j}");
    assert!(j["attempt"].as_u64().unwrap() >= 2, "{j}");
    assert_ne!(j["parts"][0]["node"].as_str().unwrap(), node, "{j}");
    let events: Vec<&str> = j["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["event"].as_str().unwrap())
        .collect();
    assert!(events.contains(&"requeued"), "{events:?}");
}

#[test]
fn a_killed_server_loses_no_accepted_job_and_never_runs_one_twice() {
    let rounds: usize = std::env::var("APIARY_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let mut c = Cluster::new("serverkill", "fifo");
    let log = c.dir.join("runs.log");
    let script = format!(
        "echo $APIARY_JOB_ID $APIARY_ATTEMPT $APIARY_NODE $CUDA_VISIBLE_DEVICES start $(date +%s%N) >> {l}; sleep 0.2; echo $APIARY_JOB_ID $APIARY_ATTEMPT $APIARY_NODE $CUDA_VISIBLE_DEVICES end $(date +%s%N) >> {l}",
        l = log.display()
    );
    let mut accepted: Vec<u64> = Vec::new();
    let mut rng = 12345u64;
    for round in 0..rounds {
        // A steady load of submissions; kill the server at a pseudo-random moment.
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let kill_after = Duration::from_millis(100 + (rng >> 33) % 400);
        let t0 = Instant::now();
        while t0.elapsed() < kill_after {
            let gpus = [1, 2, 4, 8][accepted.len() % 4];
            if let Ok(v) = c.submit(json!({"gpus": gpus, "command": sh(&script)})) {
                accepted.push(v["id"].as_u64().unwrap());
            }
            std::thread::sleep(Duration::from_millis(40));
        }
        c.kill_server();
        std::thread::sleep(Duration::from_millis(50 + (rng >> 40) % 200));
        c.start_server();
        let _ = round;
    }
    assert!(
        accepted.len() > rounds,
        "too few submissions: {}",
        accepted.len()
    );
    let jobs = c.wait_terminal(&accepted, Duration::from_secs(180));
    for j in &jobs {
        assert_eq!(j["state"], "succeeded", "{j}");
    }
    let runs = assert_no_overlap(&log);
    assert!(
        runs >= accepted.len(),
        "{runs} runs logged for {} jobs",
        accepted.len()
    );
}

#[test]
fn tokens_confine_tenants_to_their_vc_and_nodes_to_admins() {
    let c = Cluster::with_auth("auth", "fifo", true);
    let jobs = c.url("/v1/jobs");
    let job = json!({"gpus": 1, "command": ["sleep", "5"]});
    // No token, a wrong one, an expired one: 401.
    for t in [None, Some("wrong-token-0123456789"), Some(EXPIRED)] {
        let (code, v) = call("POST", &jobs, t, Some(job.clone()));
        assert_eq!(code, 401, "{t:?}: {v}");
    }
    let r = client().get(&jobs).call().unwrap();
    assert_eq!(r.headers().get("www-authenticate").unwrap(), "Bearer");
    // A tenant submits into its own VC only.
    let (code, a) = call("POST", &jobs, Some(TENANT_A), Some(job.clone()));
    assert_eq!(code, 201, "{a}");
    assert_eq!(a["vc"], "a");
    let (code, v) = call(
        "POST",
        &jobs,
        Some(TENANT_A),
        Some(json!({"gpus": 1, "command": ["true"], "vc": "b"})),
    );
    assert_eq!(
        (code, v["error"]["field"].as_str()),
        (403, Some("vc")),
        "{v}"
    );
    let id = a["id"].as_u64().unwrap();
    // Another tenant neither sees nor cancels it.
    let (code, list) = call("GET", &jobs, Some(TENANT_B), None);
    assert_eq!(code, 200);
    assert!(list.as_array().unwrap().is_empty(), "{list}");
    let (code, _) = call(
        "GET",
        &c.url(&format!("/v1/jobs/{id}")),
        Some(TENANT_B),
        None,
    );
    assert_eq!(code, 403);
    let (code, _) = call(
        "POST",
        &c.url(&format!("/v1/jobs/{id}/cancel")),
        Some(TENANT_B),
        None,
    );
    assert_eq!(code, 403);
    let (_, still) = call(
        "GET",
        &c.url(&format!("/v1/jobs/{id}")),
        Some(TENANT_A),
        None,
    );
    assert_ne!(still["state"], "cancelled");
    let (code, list) = call("GET", &jobs, Some(TENANT_A), None);
    assert_eq!((code, list.as_array().unwrap().len()), (200, 1));
    // Agents only heartbeat; only admins cordon.
    let (code, _) = call("POST", &jobs, Some(AGENT), Some(job.clone()));
    assert_eq!(code, 403);
    let (code, _) = call("POST", &c.url("/v1/nodes/n0/cordon"), Some(TENANT_A), None);
    assert_eq!(code, 403);
    let (code, _) = call("POST", &c.url("/v1/nodes/n0/cordon"), Some(ADMIN), None);
    assert_eq!(code, 204);
    let (code, _) = call(
        "POST",
        &c.url(&format!("/v1/jobs/{id}/cancel")),
        Some(TENANT_A),
        None,
    );
    assert_eq!(code, 200);
    // The agents authenticated: both nodes are up.
    let (_, nodes) = call("GET", &c.url("/v1/nodes"), Some(ADMIN), None);
    assert!(
        nodes
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["health"] == "up"),
        "{nodes}"
    );
}

/// Chromium's DOM after its scripts ran, or `None` (with a notice) when no browser is
/// installed; under CI a missing browser is a failure.
fn browse(url: &str) -> Option<String> {
    let bin = common::chromium()?;
    let out = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            url,
        ])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium failed on {url}");
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_dashboard_renders_in_a_browser_and_shows_a_submitted_job() {
    let c = Cluster::with_auth("ui", "fifo", true);
    let (code, v) = call(
        "POST",
        &c.url("/v1/jobs"),
        Some(TENANT_A),
        Some(json!({"gpus": 4, "name": "dashboard-probe", "command": ["sleep", "30"]})),
    );
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_u64().unwrap();
    let t0 = Instant::now();
    while c.job_as(id, ADMIN)["state"] != "running" {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    let Some(dom) = browse(&c.url(&format!("/ui?token={ADMIN}"))) else {
        return;
    };
    assert!(dom.contains("dashboard-probe"), "{dom}");
    assert!(
        dom.contains(&format!("href=\"/ui/jobs/{id}\"")),
        "GPU map links the job"
    );
    assert!(dom.contains("id=\"util\""), "utilisation chart");
    assert!(dom.contains("4/16"), "GPUs allocated: {dom}");
    let page = browse(&c.url(&format!("/ui/jobs/{id}?token={TENANT_A}"))).unwrap();
    assert!(
        page.contains("running") && page.contains("sleep 30"),
        "{page}"
    );
    // Without a token: the login form, not the cluster.
    let login = browse(&c.url("/ui")).unwrap();
    assert!(login.contains("name=\"token\"") && !login.contains("dashboard-probe"));
    // Another tenant sees the GPUs taken but not the job.
    let other = browse(&c.url(&format!("/ui?token={TENANT_B}"))).unwrap();
    assert!(
        !other.contains("dashboard-probe") && other.contains("another VC"),
        "{other}"
    );
}

#[test]
fn drain_requeues_a_nodes_jobs_and_logs_keep_the_output() {
    let c = Cluster::new("drain", "fifo");
    let r = c
        .submit(json!({"gpus": 8, "command": sh("echo to-stdout; echo to-stderr >&2; sleep 1")}))
        .unwrap();
    let id = r["id"].as_u64().unwrap();
    let node = c.wait_running(id);
    std::thread::sleep(Duration::from_millis(200));
    let out = Command::new(BIN)
        .args(["drain", &node, "--server", &c.url("")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 jobs requeued"));
    let j = &c.wait_terminal(&[id], Duration::from_secs(30))[0];
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_ne!(
        j["parts"][0]["node"].as_str().unwrap(),
        node,
        "ran elsewhere: {j}"
    );
    let logs = Command::new(BIN)
        .args(["logs", &id.to_string(), "--server", &c.url("")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(
        text.contains("to-stdout") && text.contains("to-stderr"),
        "{text}"
    );
    let nodes = Command::new(BIN)
        .args(["nodes", "--server", &c.url("")])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&nodes.stdout).contains("cordoned"));
}
