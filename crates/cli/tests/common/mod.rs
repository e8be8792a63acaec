//! The live tests' harness: a server and agents of the real binary on loopback, and
//! the checks the tests share.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_apiary");

/// A file of the research data beside the checkout (`../shared/traces/REL`). CI always
/// has it; a checkout without it skips, loudly.
pub fn shared(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces")
        .join(rel);
    if p.is_file() {
        return Some(p);
    }
    assert!(
        std::env::var("CI").is_err(),
        "{} missing under CI",
        p.display()
    );
    eprintln!("skipping: {} not present", p.display());
    None
}

pub struct Cluster {
    pub dir: PathBuf,
    pub port: u16,
    pub server: Option<Child>,
    pub agents: Vec<(String, Child)>,
    pub auth: bool,
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
        // A failed test leaves its state and logs behind to be read.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn client() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build(),
    )
}

pub const ADMIN: &str = "admin-token-0123456789";
pub const AGENT: &str = "agent-token-0123456789";
/// An agent token bound to node n0 only.
pub const AGENT_N0: &str = "agent-n0-token-0123456789";
pub const METRICS: &str = "metrics-token-0123456789";
pub const TENANT_A: &str = "tenant-a-token-0123456789";
pub const TENANT_B: &str = "tenant-b-token-0123456789";
pub const EXPIRED: &str = "expired-token-0123456789";
/// Tenant tokens of VC `a` that name their users.
pub const ALICE: &str = "alice-a-token-0123456789";
pub const BOB: &str = "bob-a-token-0123456789";

impl Cluster {
    pub fn new(name: &str, policy: &str) -> Cluster {
        Cluster::with_auth(name, policy, false)
    }

    pub fn with_auth(name: &str, policy: &str, auth: bool) -> Cluster {
        Cluster::with_config(name, policy, auth, "")
    }

    /// A cluster whose server config has `extra` (tables such as `[[vcs]]`) before its
    /// nodes.
    pub fn with_config(name: &str, policy: &str, auth: bool, extra: &str) -> Cluster {
        Cluster::with_nodes(name, policy, auth, extra, "")
    }

    /// [`Cluster::with_config`], with `node` lines (such as `cpus = 1`) in each node's
    /// table.
    pub fn with_nodes(name: &str, policy: &str, auth: bool, extra: &str, node: &str) -> Cluster {
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
{}{extra}
[[nodes]]
name = "n0"
gpus = 8
{node}
[[nodes]]
name = "n1"
gpus = 8
{node}
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
[[tokens]]
token = "{ALICE}"
role = "tenant"
vc = "a"
user = "alice"
[[tokens]]
token = "{BOB}"
role = "tenant"
vc = "a"
user = "bob"
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

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn start_server(&mut self) {
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

    pub fn kill_server(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.kill().unwrap();
            s.wait().unwrap();
        }
    }

    pub fn start_agent(&mut self, node: &str) {
        self.start_agent_with(node, &["--allow-root-jobs"]);
    }

    pub fn start_agent_with(&mut self, node: &str, extra: &[&str]) {
        let server = self.url("");
        self.start_agent_at(node, &server, extra);
    }

    /// Starts an agent for `node` that reaches the server at `server`.
    pub fn start_agent_at(&mut self, node: &str, server: &str, extra: &[&str]) {
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
            .args(["--server", server, "--node", node, "--gpus", "8"])
            .args(extra)
            .arg("--logs")
            .arg(self.dir.join(format!("logs-{node}")))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.agents.push((node.to_string(), a));
    }

    /// Stops an agent with SIGTERM (what `kill` and `systemctl stop` send) and waits for
    /// it to exit; returns whether it exited 0.
    pub fn term_agent(&mut self, node: &str) -> bool {
        let i = self.agents.iter().position(|a| a.0 == node).unwrap();
        let (_, mut a) = self.agents.remove(i);
        Command::new("kill")
            .args(["-TERM", &a.id().to_string()])
            .status()
            .unwrap();
        a.wait().unwrap().success()
    }

    /// The pid of a node's agent.
    pub fn agent_pid(&self, node: &str) -> u32 {
        self.agents.iter().find(|a| a.0 == node).unwrap().1.id()
    }

    pub fn kill_agent(&mut self, node: &str) {
        let i = self.agents.iter().position(|a| a.0 == node).unwrap();
        let (_, mut a) = self.agents.remove(i);
        a.kill().unwrap();
        a.wait().unwrap();
    }

    /// Replaces `node`'s agent by one started with `extra`, and waits until the server
    /// has heard the new one: until then the server would still place jobs for the old
    /// instance and requeue them once the new one claims the node.
    pub fn replace_agent(&mut self, node: &str, extra: &[&str]) {
        self.kill_agent(node);
        let killed_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        self.start_agent_with(node, extra);
        let t0 = Instant::now();
        loop {
            let (_, nodes) = call("GET", &self.url("/v1/nodes"), Some(ADMIN), None);
            let heard = nodes
                .as_array()
                .into_iter()
                .flatten()
                .find(|n| n["name"] == node)
                .and_then(|n| n["last_heartbeat_ms"].as_u64());
            if heard.is_some_and(|t| t > killed_ms) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the new agent for {node} was never heard"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn submit(&self, body: Value) -> Result<Value, (u16, Value)> {
        let mut r = client()
            .post(&self.url("/v1/jobs"))
            .send_json(&body)
            .map_err(|_| (0, Value::Null))?;
        let code = r.status().as_u16();
        let v: Value = r.body_mut().read_json().unwrap_or(Value::Null);
        if code == 201 { Ok(v) } else { Err((code, v)) }
    }

    /// Waits until the job runs; returns its first node.
    pub fn wait_running(&self, id: u64) -> String {
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

    pub fn job_as(&self, id: u64, token: &str) -> Value {
        call(
            "GET",
            &self.url(&format!("/v1/jobs/{id}")),
            Some(token),
            None,
        )
        .1
    }

    /// Job `id`, as an admin sees it.
    pub fn job(&self, id: u64) -> Value {
        let mut q = client().get(&self.url(&format!("/v1/jobs/{id}")));
        if self.auth {
            q = q.header("Authorization", &format!("Bearer {ADMIN}"));
        }
        q.call().unwrap().body_mut().read_json().unwrap()
    }

    pub fn wait_terminal(&self, ids: &[u64], limit: Duration) -> Vec<Value> {
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

/// Runs a client command of the real binary against `c`, with no token or client
/// config from the environment.
pub fn cli(c: &Cluster, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env("APIARY_SERVER", c.url(""))
        .env_remove("APIARY_TOKEN")
        .env("APIARY_CONFIG", c.dir.join("no-client.toml"))
        .output()
        .unwrap()
}

/// A command's stdout, asserting that it succeeded.
/// The id `apiary submit` printed (`submitted job N`).
pub fn id_of(o: &std::process::Output) -> u64 {
    out(o).trim().rsplit(' ').next().unwrap().parse().unwrap()
}

pub fn out(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A job that logs `<job> <attempt> <node> <gpus> start|end <ns>` lines to `log`, the
/// end line also when SIGTERM stops it (see [`assert_no_overlap`]).
pub fn logged_job(log: &Path, secs: f64) -> Value {
    let line = |what: &str| {
        format!(
            "echo $APIARY_JOB_ID $APIARY_ATTEMPT $APIARY_NODE $CUDA_VISIBLE_DEVICES {what} $(date +%s%N) >> {}",
            log.display()
        )
    };
    sh(&format!(
        "trap '{end}; exit 143' TERM; {start}; sleep {secs} & wait $!; {end}",
        end = line("end"),
        start = line("start"),
    ))
}

pub fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

/// Every line `<job> <attempt> <node> <gpus> start|end <ns>` the jobs wrote, checked:
/// each job's attempts never overlap in time, and no two processes overlapping in time
/// share a GPU of a node.
pub fn assert_no_overlap(log: &Path) -> usize {
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

pub fn call(method: &str, url: &str, token: Option<&str>, body: Option<Value>) -> (u16, Value) {
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

/// The headless browser the page tests drive, or `None` (with a notice) when none is
/// installed; under CI a missing browser is a failure.
pub fn chromium() -> Option<&'static str> {
    let bin = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if bin.is_none() {
        assert!(std::env::var("CI").is_err(), "CI must install chromium");
        eprintln!("note: no chromium installed; browser checks skipped");
    }
    bin
}
