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

/// Renders `url` in headless Chromium to `png` (kept under target/ to look at).
fn screenshot(url: &str, png: &std::path::Path) {
    let Some(bin) = common::chromium() else {
        return;
    };
    let profile = std::env::temp_dir().join(format!("apiary-shot-{}", std::process::id()));
    let out = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--hide-scrollbars",
            "--window-size=1100,1300",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(profile);
    assert!(out.status.success(), "chromium failed on {url}");
    assert!(
        std::fs::metadata(png).unwrap().len() > 20_000,
        "a blank page?"
    );
}

#[test]
fn the_dashboard_tells_jobs_apart_shows_output_and_cancels() {
    let c = Cluster::with_auth("ui2", "fifo", true);
    let submit = |gpus: u32, name: &str, script: &str| -> u64 {
        let (code, v) = call(
            "POST",
            &c.url("/v1/jobs"),
            Some(TENANT_A),
            Some(json!({"gpus": gpus, "name": name, "command": sh(script)})),
        );
        assert_eq!(code, 201, "{v}");
        v["id"].as_u64().unwrap()
    };
    let one = submit(2, "one", "sleep 30");
    let two = submit(2, "two", "sleep 30");
    let done = submit(1, "talker", "echo hello from the job; echo oops >&2");
    let waiting = submit(16, "too-big-now", "true");
    let t0 = Instant::now();
    while [one, two]
        .iter()
        .any(|&id| c.job_as(id, ADMIN)["state"] != "running")
        || c.job_as(done, ADMIN)["state"] != "succeeded"
    {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    let Some(dom) = browse(&c.url(&format!("/ui?token={TENANT_A}"))) else {
        return;
    };
    // Two jobs of one VC side by side get different colours.
    let style_of = |id: u64| -> String {
        let at = dom
            .find(&format!("href=\"/ui/jobs/{id}\" class=\"gpu\""))
            .unwrap();
        let rest = &dom[at..];
        let s = rest.find("style=\"").unwrap() + 7;
        rest[s..s + rest[s..].find('"').unwrap()].to_string()
    };
    let (a, b) = (style_of(one), style_of(two));
    let hue = |s: &str| {
        s.split("hsl(")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .to_string()
    };
    assert_ne!(hue(&a), hue(&b), "{a} / {b}");
    // The utilisation chart has labelled axes; the queue says why a job waits.
    assert!(
        dom.contains(">now</text>") && dom.contains(">100 %</text>"),
        "{dom}"
    );
    assert!(dom.contains("Resources</span>"), "{dom}");
    let page = browse(&c.url(&format!("/ui/jobs/{done}?token={TENANT_A}"))).unwrap();
    // The output tail, and history times turned into local date-times by the page.
    assert!(
        page.contains("hello from the job") && page.contains("oops"),
        "{page}"
    );
    assert!(
        !page.contains(" UTC</time>"),
        "times were not made local: {page}"
    );
    assert!(page.contains("s ago"), "{page}");
    let shots =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    screenshot(
        &c.url(&format!("/ui?token={TENANT_A}")),
        &shots.join("dashboard.png"),
    );
    screenshot(
        &c.url(&format!("/ui/jobs/{done}?token={TENANT_A}")),
        &shots.join("dashboard-job.png"),
    );

    // The cancel button: shown to the job's tenant, and it cancels with the cookie.
    let running = browse(&c.url(&format!("/ui/jobs/{one}?token={TENANT_A}"))).unwrap();
    assert!(running.contains("id=\"cancel\""), "{running}");
    let no_follow = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .build(),
    );
    let other = no_follow
        .post(&c.url(&format!("/ui/jobs/{one}/cancel")))
        .header("Cookie", &format!("apiary_token={TENANT_B}"))
        .send_empty()
        .unwrap();
    assert_eq!(other.status().as_u16(), 403);
    let r = no_follow
        .post(&c.url(&format!("/ui/jobs/{one}/cancel")))
        .header("Cookie", &format!("apiary_token={TENANT_A}"))
        .send_empty()
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(c.job_as(one, ADMIN)["state"], "cancelled");
    for id in [two, waiting] {
        call(
            "POST",
            &c.url(&format!("/v1/jobs/{id}/cancel")),
            Some(ADMIN),
            None,
        );
    }
}

#[test]
fn two_halves_of_one_gpu_run_side_by_side_with_their_shares() {
    let c = Cluster::new("share", "fifo");
    let dir = c.dir.join("out");
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        "echo $APIARY_NODE $CUDA_VISIBLE_DEVICES $APIARY_GPU_MILLI \
         $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $(date +%s%N) > {o}/$APIARY_JOB_ID.start; \
         sleep 1.5; date +%s%N > {o}/$APIARY_JOB_ID.end",
        o = dir.display()
    );
    let mut ids = Vec::new();
    for _ in 0..2 {
        let o = cli(
            &c,
            &[
                "submit",
                "--gpu-milli",
                "500",
                "--cpu",
                "0.5",
                "--mem",
                "1G",
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        ids.push(id_of(&o));
    }
    for &id in &ids {
        c.wait_running(id);
    }
    // While both run, one GPU of n0 is full and the others are free.
    let nodes = out(&cli(&c, &["nodes"]));
    let n0 = nodes.lines().find(|l| l.starts_with("n0 ")).unwrap();
    let w: Vec<&str> = n0.split_whitespace().collect();
    assert_eq!((w[4], w[5]), ("7", "0:1000"), "{nodes}");
    let q = out(&cli(&c, &["jobs"]));
    assert!(
        q.lines().filter(|l| l.contains(" 0.5 ")).count() >= 2,
        "{q}"
    );
    // The dashboard draws the shared GPU with both holders (in a real browser, where
    // there is one).
    if let Some(dom) = browse(&c.url("/ui")) {
        let shared = dom.split("gpu shared").nth(1).unwrap_or_default();
        let title = shared.split("title=\"").nth(1).unwrap_or_default();
        assert!(
            title.starts_with(&format!(
                "GPU 0: shared, job {} 500/1000, job {} 500/1000",
                ids[0], ids[1]
            )),
            "{dom}"
        );
    }
    let jobs = c.wait_terminal(&ids, Duration::from_secs(30));
    assert!(jobs.iter().all(|j| j["state"] == "succeeded"), "{jobs:?}");
    let read =
        |id: u64, end: &str| std::fs::read_to_string(dir.join(format!("{id}.{end}"))).unwrap();
    let (a, b) = (read(ids[0], "start"), read(ids[1], "start"));
    let (wa, wb): (Vec<&str>, Vec<&str>) = (
        a.split_whitespace().collect(),
        b.split_whitespace().collect(),
    );
    // Same node, same GPU, each told its half: 50 % of the SMs under MPS.
    assert_eq!(&wa[..4], ["n0", "0", "500", "50"]);
    assert_eq!(&wb[..4], ["n0", "0", "500", "50"]);
    // Side by side: each started before the other ended.
    let ns = |s: &str| s.trim().parse::<u128>().unwrap();
    let (sa, sb) = (ns(wa[4]), ns(wb[4]));
    let (ea, eb) = (ns(&read(ids[0], "end")), ns(&read(ids[1], "end")));
    assert!(
        sa < eb && sb < ea,
        "ran one after the other: {sa}-{ea} and {sb}-{eb}"
    );
    assert_eq!(jobs[0]["parts"][0]["gpu_milli"], 500);
    assert_eq!(jobs[0]["spec"]["cpu_milli"], 500);
    assert_eq!(jobs[0]["spec"]["memory_mib"], 1024);
}

#[test]
fn a_declared_failure_exit_reruns_with_its_restart_count_and_checkpoint_dir() {
    let c = Cluster::new("failexit", "fifo");
    let dir = c.dir.join("ckpt");
    std::fs::create_dir_all(&dir).unwrap();
    let script = "echo $APIARY_RESTART_COUNT $APIARY_CHECKPOINT_DIR >> $APIARY_CHECKPOINT_DIR/log; \
                  [ $APIARY_RESTART_COUNT -ge 1 ] || exit 75";
    let d = dir.display().to_string();
    let o = cli(
        &c,
        &[
            "submit",
            "--wait",
            "--checkpoint-dir",
            &d,
            "--failure-exit-codes",
            "75",
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    out(&o);
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    assert_eq!(log, format!("0 {d}\n1 {d}\n"));
    let m = common::client()
        .get(&c.url("/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(
        m.contains("apiary_failures_total{cause=\"exit_code\"} 1"),
        "{m}"
    );
}

#[test]
fn a_job_declares_its_own_grace_to_checkpoint_when_stopped() {
    // The cluster's grace is 0.3 s; the job asks for 5 s and needs 1 s to save.
    let c = Cluster::new("grace", "fifo");
    let dir = c.dir.join("saved");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    let script = format!(
        "trap 'sleep 1; echo saved > {d}/$APIARY_JOB_ID; exit 143' TERM; sleep 30 & wait $!"
    );
    let id = id_of(&cli(
        &c,
        &["submit", "--grace", "5", "--", "sh", "-c", &script],
    ));
    c.wait_running(id);
    // Started and its trap set: give the shell a moment.
    std::thread::sleep(Duration::from_millis(500));
    out(&cli(&c, &["cancel", &id.to_string()]));
    c.wait_terminal(&[id], Duration::from_secs(20));
    let t0 = Instant::now();
    while !dir.join(id.to_string()).exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        std::fs::read_to_string(dir.join(id.to_string())).unwrap_or_default(),
        "saved\n",
        "the job was killed before its checkpoint"
    );
}
