//! What an operator and a tenant meet on a busy live cluster, through the real binary
//! on loopback: listings that show every running job however many ended after it, and
//! that page rather than break when records are large.

mod common;

use common::*;
use serde_json::{Value, json};
use std::process::{Command, Output};

fn cancel(c: &Cluster, id: u64) {
    let (code, v) = call("POST", &c.url(&format!("/v1/jobs/{id}/cancel")), None, None);
    assert!(code < 300, "{code} {v}");
}

#[test]
fn jobs_shows_every_running_job_however_many_ended_after_and_pages_large_lists() {
    let c = Cluster::new("paging", "fifo");
    let running: Vec<u64> = (0..2)
        .map(|_| {
            c.submit(json!({"gpus": 8, "command": ["sleep", "60"]}))
                .unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    for &id in &running {
        c.wait_running(id);
    }
    // 1,000 newer jobs, cancelled while they wait.
    for _ in 0..1000 {
        let id = c.submit(json!({"gpus": 16, "command": ["true"]})).unwrap()["id"]
            .as_u64()
            .unwrap();
        cancel(&c, id);
    }
    // And 44 of the largest records a tenant may submit: over 10 MB together.
    let arg = "x".repeat(120 << 10);
    let val = "y".repeat(120 << 10);
    for _ in 0..44 {
        let id = c
            .submit(json!({"gpus": 16, "command": ["true", arg], "env": {"BIG": val}}))
            .unwrap()["id"]
            .as_u64()
            .unwrap();
        cancel(&c, id);
    }
    let text = out(&cli(&c, &["jobs"]));
    let listed: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(listed.len(), 2, "{text}");
    for id in &running {
        assert!(
            listed
                .iter()
                .any(|l| l.split_whitespace().next() == Some(&id.to_string())),
            "{text}"
        );
    }
    // Everything, in pages: no reply over the stated size.
    let all: Vec<Value> =
        serde_json::from_str(&out(&cli(&c, &["jobs", "-a", "-o", "json"]))).unwrap();
    assert_eq!(all.len(), 1046);
    let mut r = client().get(&c.url("/v1/jobs")).call().unwrap();
    let next = r
        .headers()
        .get("x-apiary-next-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = r
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap();
    assert!(body.len() <= 4 << 20, "{} bytes", body.len());
    assert!(next.is_some(), "a next page is named");
    // A bad state or limit is named.
    let (code, v) = call("GET", &c.url("/v1/jobs?state=runing"), None, None);
    assert_eq!(code, 400);
    assert!(v.to_string().contains("unknown state 'runing'"), "{v}");
    assert_eq!(call("GET", &c.url("/v1/jobs?limit=0"), None, None).0, 400);
}

#[test]
fn tokens_come_from_a_file_or_the_environment_and_readable_token_files_are_warned_of() {
    use std::os::unix::fs::PermissionsExt as _;
    let c = Cluster::with_auth("tokens", "fifo", true);
    let log = std::fs::read_to_string(c.dir.join("server.log")).unwrap();
    assert!(
        log.contains("tokens.toml holds API tokens and group or others may read it"),
        "{log}"
    );
    let o = cli(&c, &["jobs", "--token", TENANT_A]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--token-file") && err.contains("/proc"),
        "{err}"
    );
    let f = c.dir.join("tenant-a.token");
    std::fs::write(&f, format!("{TENANT_A}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    out(&cli(&c, &["jobs", "--token-file", f.to_str().unwrap()]));
    let o = Command::new(BIN)
        .args(["jobs"])
        .env("APIARY_SERVER", c.url(""))
        .env("APIARY_TOKEN", TENANT_A)
        .env("APIARY_CONFIG", c.dir.join("no-client.toml"))
        .output()
        .unwrap();
    out(&o);
}

fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn submit_and_cancel_cycles_keep_server_memory_and_state_flat() {
    let c = Cluster::with_config(
        "cycles",
        "fifo",
        false,
        "max_jobs_per_vc = 101\nmax_records_per_vc = 120\n",
    );
    let blocker = c
        .submit(json!({"gpus": 16, "command": ["sleep", "600"]}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    c.wait_running(blocker);
    let pid = c.server.as_ref().unwrap().id();
    let state = c.dir.join("data/state.redb");
    let arg = "x".repeat(100 << 10);
    let val = "y".repeat(100 << 10);
    let mut figures = Vec::new();
    for cycle in 0..5 {
        let ids: Vec<u64> = (0..100)
            .map(|_| {
                c.submit(json!({"gpus": 16, "command": ["true", arg], "env": {"BIG": val}}))
                    .unwrap_or_else(|e| panic!("cycle {cycle}: {e:?}"))["id"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        for id in ids {
            cancel(&c, id);
        }
        figures.push((rss_kb(pid), std::fs::metadata(&state).unwrap().len()));
    }
    eprintln!("(server RSS kB, state.redb bytes) after each cycle: {figures:?}");
    let (rss1, disk1) = figures[1];
    let (rss4, disk4) = figures[4];
    assert!(rss4 < rss1 + rss1 / 2, "memory grew: {figures:?}");
    assert!(disk4 < disk1 + disk1 / 2, "state grew: {figures:?}");
    // The hot list holds at most the VC's limit; the archive has the rest.
    let hot: Vec<Value> =
        serde_json::from_str(&out(&cli(&c, &["jobs", "-a", "-o", "json"]))).unwrap();
    assert!(hot.len() <= 120, "{} hot", hot.len());
    let all: Vec<Value> = serde_json::from_str(&out(&cli(
        &c,
        &["jobs", "-a", "--since", "now-1hours", "-o", "json"],
    )))
    .unwrap();
    assert_eq!(all.len(), 501);
    let first = all.iter().find(|j| j["id"] == 2).unwrap();
    assert_eq!(first["state"], "cancelled");
    assert_eq!(first["spec"]["env"]["BIG"], "", "archived without values");
    // `apiary job ID` still finds an archived job.
    let j: Value = serde_json::from_str(&out(&cli(&c, &["job", "2", "-o", "json"]))).unwrap();
    assert_eq!(j["id"], 2);
}

fn cli_as(c: &Cluster, token: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("APIARY_SERVER", c.url(""))
        .env("APIARY_TOKEN", token)
        .env("APIARY_CONFIG", c.dir.join("no-client.toml"))
        .envs(env.iter().copied())
        .current_dir(&c.dir)
        .output()
        .unwrap()
}

#[test]
fn jobs_record_their_user_whose_environment_only_they_and_admins_read() {
    let c = Cluster::with_auth("users", "fifo", true);
    // Alice submits with a secret-looking variable in her shell and one named.
    let o = cli_as(
        &c,
        ALICE,
        &[
            "submit",
            "-g",
            "16",
            "--time",
            "90",
            "--export=ALL,HF_TOKEN",
            "--",
            "sleep",
            "30",
        ],
        &[
            ("WANDB_API_KEY", "wandb-secret"),
            ("HF_TOKEN", "hf-secret"),
            ("LR", "0.1"),
        ],
    );
    let said = String::from_utf8_lossy(&o.stderr).to_string();
    let text = out(&o);
    let id: u64 = text.split_whitespace().last().unwrap().parse().unwrap();
    assert!(
        said.contains("left out") && said.contains("WANDB_API_KEY"),
        "{said}"
    );
    assert!(!said.contains("HF_TOKEN "), "named, so sent: {said}");
    let mine: Value = serde_json::from_str(&out(&cli_as(
        &c,
        ALICE,
        &["job", &id.to_string(), "-o", "json"],
        &[],
    )))
    .unwrap();
    assert_eq!(mine["user"], "alice");
    assert_eq!(mine["spec"]["env"]["LR"], "0.1");
    assert_eq!(mine["spec"]["env"]["HF_TOKEN"], "hf-secret");
    assert!(mine["spec"]["env"].get("WANDB_API_KEY").is_none());
    // Bob, in the same VC, sees the names but not the values; the admin sees both.
    let theirs: Value = serde_json::from_str(&out(&cli_as(
        &c,
        BOB,
        &["job", &id.to_string(), "-o", "json"],
        &[],
    )))
    .unwrap();
    assert_eq!(theirs["spec"]["env"]["HF_TOKEN"], "");
    assert_eq!(theirs["spec"]["env"]["LR"], "");
    let listed: Vec<Value> =
        serde_json::from_str(&out(&cli_as(&c, BOB, &["jobs", "-o", "json"], &[]))).unwrap();
    assert_eq!(listed[0]["spec"]["env"]["HF_TOKEN"], "");
    let admin: Value = serde_json::from_str(&out(&cli_as(
        &c,
        ADMIN,
        &["job", &id.to_string(), "-o", "json"],
        &[],
    )))
    .unwrap();
    assert_eq!(admin["spec"]["env"]["HF_TOKEN"], "hf-secret");
    // USER, TIMELIMIT and WORKDIR show; --user filters.
    let wide = out(&cli_as(&c, BOB, &["jobs", "-o", "wide"], &[]));
    let head: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert!(
        head.contains(&"USER") && head.contains(&"TIMELIMIT") && head.contains(&"WORKDIR"),
        "{wide}"
    );
    let row = wide.lines().nth(1).unwrap();
    assert!(
        row.contains("alice") && row.contains("1:30") && row.contains(c.dir.to_str().unwrap()),
        "{wide}"
    );
    assert_eq!(
        out(&cli_as(&c, BOB, &["jobs", "--user", "bob"], &[]))
            .lines()
            .count(),
        1
    );
    let one = out(&cli_as(&c, ADMIN, &["job", &id.to_string()], &[]));
    assert!(
        one.contains("user alice") && one.contains("limit    1:30") && one.contains("workdir"),
        "{one}"
    );
}

#[test]
fn cancel_takes_lists_arrays_and_filters_as_scancel_does() {
    let c = Cluster::with_auth("cancels", "fifo", true);
    let blocker = out(&cli_as(
        &c,
        ALICE,
        &["submit", "-g", "16", "--", "sleep", "60"],
        &[],
    ));
    let blocker: u64 = blocker.split_whitespace().last().unwrap().parse().unwrap();
    let ids = |text: &str| -> Vec<u64> {
        text.split(|ch: char| !ch.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    let arr = out(&cli_as(
        &c,
        ALICE,
        &[
            "submit", "-g", "1", "--array", "0-5", "--name", "train", "--", "true",
        ],
        &[],
    ));
    assert!(
        arr.ends_with(&format!("{}-{}\n", blocker + 1, blocker + 6)),
        "{arr}"
    );
    let tasks: Vec<u64> = (blocker + 1..=blocker + 6).collect();
    let a = tasks[0];
    let state = |id: u64| {
        serde_json::from_str::<Value>(&out(&cli_as(
            &c,
            ADMIN,
            &["job", &id.to_string(), "-o", "json"],
            &[],
        )))
        .unwrap()["state"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // Tasks 1 and 2 by array syntax.
    out(&cli_as(&c, ALICE, &["cancel", &format!("{a}_[1-2]")], &[]));
    assert_eq!(
        tasks.iter().map(|&t| state(t)).collect::<Vec<_>>(),
        [
            "queued",
            "cancelled",
            "cancelled",
            "queued",
            "queued",
            "queued"
        ]
    );
    // Bob's jobs by --user only.
    let b1 = ids(&out(&cli_as(
        &c,
        BOB,
        &["submit", "-g", "1", "--", "true"],
        &[],
    )))[0];
    let b2 = ids(&out(&cli_as(
        &c,
        BOB,
        &["submit", "-g", "1", "--", "true"],
        &[],
    )))[0];
    let o = out(&cli_as(&c, ADMIN, &["cancel", "--user", "bob"], &[]));
    assert_eq!(ids(&o), [b1, b2], "{o}");
    // The array's id: every task left; then two ids at once, one of them over.
    out(&cli_as(&c, ALICE, &["cancel", &a.to_string()], &[]));
    assert!(tasks.iter().all(|&t| state(t) == "cancelled"));
    let o = cli_as(
        &c,
        ALICE,
        &["cancel", &blocker.to_string(), &a.to_string()],
        &[],
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already cancelled"),
        "{o:?}"
    );
    assert_eq!(state(blocker), "cancelled");
    // Nothing named: a clear refusal.
    let o = cli_as(&c, ALICE, &["cancel"], &[]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("cancel what?"));
}

#[test]
fn the_job_page_shows_an_ended_jobs_real_state_exit_and_last_output() {
    let c = Cluster::new("jobpage", "fifo");
    let id = c
        .submit(json!({"gpus": 8, "command": sh("echo hello-from-the-job; sleep 30")}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    c.wait_running(id);
    std::thread::sleep(std::time::Duration::from_millis(500));
    cancel(&c, id);
    let t0 = std::time::Instant::now();
    let html = loop {
        let mut r = client()
            .get(&c.url(&format!("/ui/jobs/{id}")))
            .call()
            .unwrap();
        let html = r.body_mut().read_to_string().unwrap();
        if html.contains("<td>143</td>") || t0.elapsed() > std::time::Duration::from_secs(10) {
            break html;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(
        html.contains("class=\"state-cancelled\">cancelled"),
        "{html}"
    );
    assert!(
        html.contains("<td>143</td>"),
        "exit of the stopped process: {html}"
    );
    assert!(html.contains("hello-from-the-job"), "{html}");
    assert!(!html.contains("running; its output so far"), "{html}");
    let j = c.job(id);
    assert_eq!(j["parts"][0]["exit"], 143, "{j}");
}

#[test]
fn a_cancel_with_a_body_gets_its_whole_reply() {
    use std::io::{Read as _, Write as _};
    let c = Cluster::new("cancelbody", "fifo");
    let blocker = c
        .submit(json!({"gpus": 16, "command": ["sleep", "60"]}))
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    c.wait_running(blocker);
    let big = "x".repeat(120 << 10);
    for _ in 0..20 {
        let id = c
            .submit(json!({"gpus": 16, "command": ["true", big]}))
            .unwrap()["id"]
            .as_u64()
            .unwrap();
        // A body the handler has no use for, on a connection that closes after the
        // reply: the whole reply arrives.
        let body = format!("{}{{}}", " ".repeat(256 << 10));
        let mut s = std::net::TcpStream::connect(("127.0.0.1", c.port)).unwrap();
        write!(
            s,
            "POST /v1/jobs/{id}/cancel HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).unwrap();
        let text = String::from_utf8_lossy(&reply);
        assert!(
            text.starts_with("HTTP/1.1 200"),
            "{}",
            &text[..text.len().min(200)]
        );
        assert!(text.ends_with("}"), "cut short: {} bytes", reply.len());
    }
}
