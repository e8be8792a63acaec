//! End to end on loopback: `apiary serve` and two `apiary agent`s declaring 8 GPUs each
//! run real short commands; an agent killed mid-job has its job requeued elsewhere; the
//! server killed with SIGKILL under a steady submission load loses no accepted job and
//! never runs one job twice at the same time.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_apiary");

struct Cluster {
    dir: PathBuf,
    port: u16,
    server: Option<Child>,
    agents: Vec<(String, Child)>,
    auth: bool,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(s) = &mut self.server {
            let _ = s.kill();
            let _ = s.wait();
        }
        for (_, a) in &mut self.agents {
            let _ = a.kill();
            let _ = a.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn client() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build(),
    )
}

const ADMIN: &str = "admin-token-0123456789";
const AGENT: &str = "agent-token-0123456789";
/// An agent token bound to node n0 only.
const AGENT_N0: &str = "agent-n0-token-0123456789";
const METRICS: &str = "metrics-token-0123456789";
const TENANT_A: &str = "tenant-a-token-0123456789";
const TENANT_B: &str = "tenant-b-token-0123456789";
const EXPIRED: &str = "expired-token-0123456789";

impl Cluster {
    fn new(name: &str, policy: &str) -> Cluster {
        Cluster::with_auth(name, policy, false)
    }

    fn with_auth(name: &str, policy: &str, auth: bool) -> Cluster {
        let dir = std::env::temp_dir().join(format!("apiary-live-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        std::fs::write(
            dir.join("server.toml"),
            format!(
                r#"listen = "127.0.0.1:{port}"
data_dir = "{}"
policy = "{policy}"
heartbeat_interval_s = 0.1
node_timeout_s = 1.5
grace_s = 0.3
{}[[nodes]]
name = "n0"
gpus = 8
[[nodes]]
name = "n1"
gpus = 8
"#,
                dir.join("data").display(),
                if auth {
                    "tokens_file = \"tokens.toml\"\n"
                } else {
                    ""
                }
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("tokens.toml"),
            format!(
                r#"[[tokens]]
token = "{ADMIN}"
role = "admin"
[[tokens]]
token = "{AGENT}"
role = "agent"
nodes = ["n0", "n1"]
[[tokens]]
token = "{AGENT_N0}"
role = "agent"
nodes = ["n0"]
[[tokens]]
token = "{METRICS}"
role = "metrics"
[[tokens]]
token = "{TENANT_A}"
role = "tenant"
vc = "a"
[[tokens]]
token = "{TENANT_B}"
role = "tenant"
vc = "b"
[[tokens]]
token = "{EXPIRED}"
role = "admin"
expires_unix_s = 1000
"#
            ),
        )
        .unwrap();
        let mut c = Cluster {
            dir,
            port,
            server: None,
            agents: Vec::new(),
            auth,
        };
        c.start_server();
        for n in ["n0", "n1"] {
            c.start_agent(n);
        }
        c
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn start_server(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .unwrap();
        let s = Command::new(BIN)
            .args(["serve", "-c"])
            .arg(self.dir.join("server.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.server = Some(s);
        let t0 = Instant::now();
        while client()
            .get(&self.url("/v1/cluster"))
            .header("Authorization", &format!("Bearer {ADMIN}"))
            .call()
            .map(|r| r.status().as_u16() != 200)
            .unwrap_or(true)
        {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "server did not come up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill_server(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.kill().unwrap();
            s.wait().unwrap();
        }
    }

    fn start_agent(&mut self, node: &str) {
        self.start_agent_with(node, &["--allow-root-jobs"]);
    }

    fn start_agent_with(&mut self, node: &str, extra: &[&str]) {
        use std::os::unix::fs::PermissionsExt as _;
        let mut cmd = Command::new(BIN);
        cmd.arg("agent");
        if self.auth {
            let f = self.dir.join("agent.token");
            std::fs::write(&f, format!("{AGENT}\n")).unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
            cmd.arg("--token-file").arg(f);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("agent-{node}.log")))
            .unwrap();
        let a = cmd
            .args(["--server", &self.url(""), "--node", node, "--gpus", "8"])
            .args(extra)
            .arg("--logs")
            .arg(self.dir.join(format!("logs-{node}")))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.agents.push((node.to_string(), a));
    }

    fn kill_agent(&mut self, node: &str) {
        let i = self.agents.iter().position(|a| a.0 == node).unwrap();
        let (_, mut a) = self.agents.remove(i);
        a.kill().unwrap();
        a.wait().unwrap();
    }

    fn submit(&self, body: Value) -> Result<Value, (u16, Value)> {
        let mut r = client()
            .post(&self.url("/v1/jobs"))
            .send_json(&body)
            .map_err(|_| (0, Value::Null))?;
        let code = r.status().as_u16();
        let v: Value = r.body_mut().read_json().unwrap_or(Value::Null);
        if code == 201 { Ok(v) } else { Err((code, v)) }
    }

    /// Waits until the job runs; returns its first node.
    fn wait_running(&self, id: u64) -> String {
        let t0 = Instant::now();
        loop {
            let j = self.job(id);
            if j["state"] == "running" {
                return j["parts"][0]["node"].as_str().unwrap().to_string();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "job {id} never ran: {j}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn job_as(&self, id: u64, token: &str) -> Value {
        call(
            "GET",
            &self.url(&format!("/v1/jobs/{id}")),
            Some(token),
            None,
        )
        .1
    }

    fn job(&self, id: u64) -> Value {
        client()
            .get(&self.url(&format!("/v1/jobs/{id}")))
            .call()
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap()
    }

    fn wait_terminal(&self, ids: &[u64], limit: Duration) -> Vec<Value> {
        let t0 = Instant::now();
        loop {
            let jobs: Vec<Value> = ids.iter().map(|&i| self.job(i)).collect();
            if jobs.iter().all(|j| {
                matches!(
                    j["state"].as_str(),
                    Some("succeeded" | "failed" | "cancelled")
                )
            }) {
                return jobs;
            }
            if t0.elapsed() >= limit {
                let open: Vec<&Value> = jobs
                    .iter()
                    .filter(|j| {
                        !matches!(
                            j["state"].as_str(),
                            Some("succeeded" | "failed" | "cancelled")
                        )
                    })
                    .collect();
                let nodes: Value = client()
                    .get(&self.url("/v1/nodes"))
                    .call()
                    .unwrap()
                    .body_mut()
                    .read_json()
                    .unwrap();
                panic!(
                    "{} jobs not finished in time, e.g. {}\nnodes: {nodes}",
                    open.len(),
                    serde_json::to_string(&open.iter().take(3).collect::<Vec<_>>()).unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

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

/// Every line `<job> <attempt> <node> <gpus> start|end <ns>` the jobs wrote, checked:
/// each job's attempts never overlap in time, and no two processes overlapping in time
/// share a GPU of a node.
fn assert_no_overlap(log: &Path) -> usize {
    use std::collections::BTreeMap;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    // (job, attempt, node) -> (gpus, start, end)
    let mut spans: BTreeMap<(u64, u64, String), (String, u128, u128)> = BTreeMap::new();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() != 6 {
            continue;
        }
        let key = (
            w[0].parse().unwrap(),
            w[1].parse().unwrap(),
            w[2].to_string(),
        );
        let t: u128 = w[5].parse().unwrap();
        let e = spans
            .entry(key)
            .or_insert((w[3].to_string(), u128::MAX, u128::MAX));
        if w[4] == "start" {
            e.1 = t;
        } else {
            e.2 = t;
        }
    }
    let v: Vec<_> = spans.into_iter().collect();
    for (i, ((j1, a1, n1), (g1, s1, e1))) in v.iter().enumerate() {
        assert!(
            *s1 != u128::MAX && *e1 != u128::MAX,
            "job {j1} attempt {a1} on {n1} did not log both ends"
        );
        for ((j2, a2, n2), (g2, s2, e2)) in &v[i + 1..] {
            let overlap = s1 < e2 && s2 < e1;
            if !overlap {
                continue;
            }
            assert!(
                !(j1 == j2 && a1 != a2),
                "job {j1} ran twice at once (attempts {a1}, {a2})"
            );
            let gpus = |g: &str| {
                g.split(',')
                    .map(str::to_string)
                    .collect::<std::collections::BTreeSet<_>>()
            };
            assert!(
                n1 != n2 || gpus(g1).is_disjoint(&gpus(g2)),
                "GPU double-booked on {n1}: job {j1} {g1} and job {j2} {g2}"
            );
        }
    }
    v.len()
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

fn call(method: &str, url: &str, token: Option<&str>, body: Option<Value>) -> (u16, Value) {
    let c = client();
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut r = if method == "GET" {
        let mut q = c.get(url);
        if let Some(a) = &auth {
            q = q.header("Authorization", a);
        }
        q.call().unwrap()
    } else {
        let mut q = c.post(url);
        if let Some(a) = &auth {
            q = q.header("Authorization", a);
        }
        q.send_json(body.unwrap_or(json!({}))).unwrap()
    };
    let code = r.status().as_u16();
    let v = r.body_mut().read_json().unwrap_or(Value::Null);
    (code, v)
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
    let bin = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    let Some(bin) = bin else {
        assert!(std::env::var("CI").is_err(), "CI must install chromium");
        eprintln!("note: no chromium installed; dashboard browser test skipped");
        return None;
    };
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
