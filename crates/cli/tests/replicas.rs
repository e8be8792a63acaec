//! Two servers on one etcd prefix (a build with `--features etcd`): one leads and
//! serves, the other answers 503 naming it; when the leader is killed, the other takes
//! the leadership over once its lease runs out and serves every job the first one
//! acknowledged. An agent and the clients, given both servers' URLs, go on with
//! whichever leads: the job the first server started finishes under the second, and
//! what the first archived the second reads.
#![cfg(feature = "etcd")]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_apiary");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server on `port` keeping its state on `etcd`, with a 2 s leader lease; finished
/// jobs go after 1 s to an archive every server shares (`dir/archive`).
fn server(dir: &std::path::Path, name: &str, port: u16, etcd: &str) -> Child {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let cfg = d.join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\nstore = \"etcd\"\n\
             etcd_endpoints = [\"{etcd}\"]\netcd_prefix = \"ha-test\"\nleader_lease_s = 2\n\
             archive_dir = \"{}\"\nretain_finished_s = 1\n\
             [[nodes]]\nname = \"n0\"\ngpus = 4\n",
            d.join("data").display(),
            dir.join("archive").display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(d.join("serve.log")).unwrap();
    Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// (status, body) of GET `path` on `port`, or none while nothing listens.
fn get(port: u16, path: &str) -> Option<(u16, serde_json::Value)> {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(2)))
            .build(),
    );
    let mut r = agent
        .get(&format!("http://127.0.0.1:{port}{path}"))
        .call()
        .ok()?;
    let status = r.status().as_u16();
    let body = r.body_mut().read_json().unwrap_or(serde_json::Value::Null);
    Some((status, body))
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    t0.elapsed()
}

#[test]
fn the_follower_takes_over_when_the_leader_is_killed() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(etcd) = rt.block_on(apiary_store::testing::etcd::Etcd::start("replicas")) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("apiary-replicas-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (pa, pb) = (free_port(), free_port());
    let mut a = server(&dir, "a", pa, &etcd.url);
    wait_for("a leads", Duration::from_secs(20), || {
        get(pa, "/v1/cluster").is_some_and(|r| r.0 == 200)
    });
    let mut b = server(&dir, "b", pb, &etcd.url);
    let a_url = format!("http://127.0.0.1:{pa}");
    wait_for("b follows a", Duration::from_secs(20), || {
        get(pb, "/v1/jobs").is_some_and(|(s, body)| s == 503 && body["leader"] == a_url)
    });
    let b_url = format!("http://127.0.0.1:{pb}");
    let both = format!("{b_url},{a_url}");
    // An agent for n0 that knows both servers (the follower first).
    let logs = dir.join("logs");
    let mut agent = Command::new(BIN)
        .args([
            "agent",
            "--node",
            "n0",
            "--gpus",
            "4",
            "--allow-root-jobs",
            "--server",
            &both,
        ])
        .arg("--logs")
        .arg(&logs)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
        .spawn()
        .unwrap();
    // A job that runs until told to stop, submitted through the client with both URLs.
    let done = dir.join("done");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done", done.display());
    let cli = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("APIARY_SERVER", &both)
            .env("APIARY_CONFIG", dir.join("none.toml"))
            .output()
            .unwrap()
    };
    // A job that ends under a and goes to the shared archive.
    let o = cli(&["submit", "--wait", "--", "true"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let archived = |port: u16| {
        get(port, "/v1/jobs/archived?since=0").is_some_and(|(s, l)| {
            s == 200 && l.as_array().is_some_and(|l| l.iter().any(|j| j["id"] == 1))
        })
    };
    wait_for("job 1 is archived by a", Duration::from_secs(20), || {
        archived(pa)
    });
    let o = cli(&["submit", "--", "sh", "-c", &script]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let id: u64 = String::from_utf8_lossy(&o.stdout)
        .trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    wait_for("the job runs on n0", Duration::from_secs(20), || {
        get(pa, &format!("/v1/jobs/{id}")).is_some_and(|(_, j)| {
            j["state"] == "running" && j["history"].to_string().contains("started")
        })
    });
    // a dies without a word; b leads once a's lease has run out, rebuilt from etcd.
    a.kill().unwrap();
    a.wait().unwrap();
    let took = wait_for("b takes over", Duration::from_secs(20), || {
        get(pb, "/v1/jobs").is_some_and(|r| r.0 == 200)
    });
    eprintln!("fail-over: {took:?} from the kill to b's first answer");
    assert!(archived(pb), "b reads what a archived");
    let (_, jobs) = get(pb, "/v1/jobs").unwrap();
    assert_eq!(jobs[0]["id"], id, "{jobs}");
    assert_eq!(jobs[0]["state"], "running", "as a left it: {jobs}");
    // The agent goes on with b; the job, never stopped, finishes there.
    std::fs::write(&done, "").unwrap();
    wait_for("the job succeeds under b", Duration::from_secs(30), || {
        get(pb, &format!("/v1/jobs/{id}")).is_some_and(|(_, j)| j["state"] == "succeeded")
    });
    let o = cli(&["job", &id.to_string()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("succeeded"));
    let (_, j) = get(pb, &format!("/v1/jobs/{id}")).unwrap();
    assert_eq!(j["attempt"], 1, "it ran once: {j}");
    let _ = agent.kill();
    let _ = agent.wait();
    let log = std::fs::read_to_string(dir.join("b/serve.log")).unwrap();
    assert!(log.contains(&format!("following {a_url}")), "{log}");
    assert!(log.contains("leading, at revision"), "{log}");
    let _ = b.kill();
    let _ = b.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fail-over test: three etcd members, two servers (2 s lease), two agents
/// and a steady stream of submissions, all given both servers' URLs. Twenty times the
/// leader is killed with SIGKILL and started again as a follower; every fifth round an
/// etcd member is killed and restarted too. Every job that got a 201 succeeds, none ran
/// twice at once, no two processes shared a GPU.
#[test]
fn twenty_fail_overs_under_load_lose_no_accepted_job() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(mut etcd) = rt.block_on(apiary_store::testing::etcd::Cluster::start("failover", 3))
    else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("apiary-failover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ports = [free_port(), free_port()];
    let endpoints = etcd.urls.join("\", \"");
    let start = |k: usize| {
        let d = dir.join(format!("s{k}"));
        std::fs::create_dir_all(&d).unwrap();
        let cfg = d.join("server.toml");
        std::fs::write(
            &cfg,
            format!(
                "listen = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\nstore = \"etcd\"\n\
                 etcd_endpoints = [\"{endpoints}\"]\netcd_prefix = \"failover\"\n\
                 leader_lease_s = 2\nheartbeat_interval_s = 0.2\nnode_timeout_s = 20\n\
                 grace_s = 0.5\nlog_format = \"off\"\n\
                 [[nodes]]\nname = \"n0\"\ngpus = 4\n[[nodes]]\nname = \"n1\"\ngpus = 4\n",
                ports[k],
                d.join("data").display()
            ),
        )
        .unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("serve.log"))
            .unwrap();
        Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    };
    let mut servers = [Some(start(0)), Some(start(1))];
    let leading = |k: usize| get(ports[k], "/v1/cluster").is_some_and(|r| r.0 == 200);
    wait_for("a leader", Duration::from_secs(30), || {
        leading(0) || leading(1)
    });
    let both = format!(
        "http://127.0.0.1:{},http://127.0.0.1:{}",
        ports[0], ports[1]
    );
    let mut agents: Vec<Child> = ["n0", "n1"]
        .iter()
        .map(|n| {
            Command::new(BIN)
                .args(["agent", "--node", n, "--gpus", "4", "--allow-root-jobs"])
                .args(["--server", &both, "--logs"])
                .arg(dir.join(format!("logs-{n}")))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join(format!("agent-{n}.log"))).unwrap())
                .spawn()
                .unwrap()
        })
        .collect();
    // Steady submissions through a client of both URLs, each job logging its spans.
    let log = dir.join("spans.log");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let submitter = {
        let (stop, both, log) = (stop.clone(), both.clone(), log.clone());
        std::thread::spawn(move || {
            let c = apiary_client::Client::new(&both, Duration::from_secs(5));
            let mut acked = Vec::new();
            let mut k = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                k += 1;
                let body = serde_json::json!({
                    "gpus": 1 + k % 2, "command": common::logged_job(&log, 0.3)
                });
                if let Ok(r) = c.post::<_, serde_json::Value>("/v1/jobs", &body) {
                    acked.push(r["id"].as_u64().unwrap());
                }
                std::thread::sleep(Duration::from_millis(150));
            }
            acked
        })
    };
    let mut took = Vec::new();
    let mut exited = 0;
    for round in 0..20 {
        std::thread::sleep(Duration::from_millis(800));
        // A server that stopped by itself is started again, as its supervisor would.
        for (k, s) in servers.iter_mut().enumerate() {
            if s.as_mut().unwrap().try_wait().unwrap().is_some() {
                exited += 1;
                *s = Some(start(k));
            }
        }
        wait_for("a leader", Duration::from_secs(30), || {
            leading(0) || leading(1)
        });
        let l = if leading(0) { 0 } else { 1 };
        let mut s = servers[l].take().unwrap();
        s.kill().unwrap();
        s.wait().unwrap();
        let t = wait_for("the other leads", Duration::from_secs(30), || {
            leading(1 - l)
        });
        took.push(t);
        servers[l] = Some(start(l));
        if round % 5 == 4 {
            let m = round / 5 % 3;
            etcd.kill(m);
            std::thread::sleep(Duration::from_millis(500));
            etcd.restart(m);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = submitter.join().unwrap();
    assert!(
        acked.len() > 50,
        "only {} submissions acknowledged",
        acked.len()
    );
    // Every acknowledged job ends, and succeeds.
    let c = apiary_client::Client::new(&both, Duration::from_secs(5));
    for id in &acked {
        wait_for(&format!("job {id} ends"), Duration::from_secs(60), || {
            c.get::<serde_json::Value>(&format!("/v1/jobs/{id}"))
                .is_ok_and(|j| j["state"] != "queued" && j["state"] != "running")
        });
        let j: serde_json::Value = c.get(&format!("/v1/jobs/{id}")).unwrap();
        assert_eq!(j["state"], "succeeded", "{j}");
    }
    let spans = common::assert_no_overlap(&log);
    assert!(
        spans >= acked.len(),
        "{spans} spans for {} jobs",
        acked.len()
    );
    took.sort();
    eprintln!(
        "fail-over over 20 rounds: p50 {:?}, max {:?}; {} jobs accepted, all succeeded; \
         {exited} servers stopped by themselves",
        took[took.len() / 2],
        took[took.len() - 1],
        acked.len()
    );
    for a in &mut agents {
        let _ = a.kill();
        let _ = a.wait();
    }
    for s in servers.iter_mut().flatten() {
        let _ = s.kill();
        let _ = s.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
