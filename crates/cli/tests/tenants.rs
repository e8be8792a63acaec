//! Tenants kept apart on the real binary, as root: each VC's jobs run as its own
//! account, so a job of one tenant can neither read nor signal another tenant's
//! processes nor read its output; a job whose account is missing, or that would run as
//! root unasked, fails saying why.

mod common;

use common::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

fn submit_as(c: &Cluster, token: &str, body: Value) -> u64 {
    let (code, v) = call("POST", &c.url("/v1/jobs"), Some(token), Some(body));
    assert_eq!(code, 201, "{v}");
    v["id"].as_u64().unwrap()
}

/// The pid of a process whose environment holds `needle`.
fn pid_with_env(needle: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        env.split(|&b| b == 0)
            .any(|v| v == needle.as_bytes())
            .then_some(pid)
    })
}

const VCS: &str = r#"
[[vcs]]
name = "a"
run_as = "nobody"
[[vcs]]
name = "b"
run_as = "daemon"
[[vcs]]
name = "c"
[[vcs]]
name = "d"
run_as = "no-such-user-apiary"
"#;

#[test]
fn each_vcs_jobs_run_as_its_account_and_cannot_touch_another_tenants() {
    use std::os::unix::fs::MetadataExt as _;
    if !is_root() {
        eprintln!("note: not root; accounts per VC need a root agent, test skipped");
        return;
    }
    let mut c = Cluster::with_config("tenants", "fifo", true, VCS);
    // Root agents with neither --run-as nor --allow-root-jobs.
    for n in ["n0", "n1"] {
        c.replace_agent(n, &[]);
    }
    let a = submit_as(
        &c,
        TENANT_A,
        json!({"gpus": 8, "vc": "a", "command": ["sh", "-c", "echo uid=$(id -u); sleep 30"],
               "env": {"SECRET_A": "hunter2-a"}}),
    );
    let node = c.wait_running(a);
    let t0 = std::time::Instant::now();
    let pid = loop {
        if let Some(p) = pid_with_env("SECRET_A=hunter2-a") {
            break p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "job a never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Its output file, once the agent has made it.
    let t0 = std::time::Instant::now();
    let out_a = loop {
        let found = std::fs::read_dir(c.dir.join(format!("logs-{node}")))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{a}-")) && n.ends_with(".out"))
            })
            .max();
        if let Some(p) = found {
            break p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "job a wrote no output file"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let meta = std::fs::metadata(&out_a).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (65534, 0o600));

    // Tenant b's job, on the other node, tries to read a's environment and output and
    // to kill it.
    let script = format!(
        "cat /proc/{pid}/environ >/dev/null 2>&1; echo read=$?; \
         kill -9 {pid} 2>/dev/null; echo kill=$?; \
         cat {} >/dev/null 2>&1; echo out=$?; echo uid=$(id -u)",
        out_a.display()
    );
    let b = submit_as(
        &c,
        TENANT_B,
        json!({"gpus": 8, "vc": "b", "command": ["sh", "-c", script]}),
    );
    let jb = &c.wait_terminal(&[b], Duration::from_secs(20))[0];
    let tail = jb["parts"][0]["output_tail"].as_str().unwrap();
    for want in ["read=1", "kill=1", "out=1", "uid=1"] {
        assert!(tail.contains(want), "{want} in {tail}");
    }
    let ja = call(
        "GET",
        &c.url(&format!("/v1/jobs/{a}")),
        Some(TENANT_A),
        None,
    )
    .1;
    assert_eq!(
        (ja["state"].as_str(), ja["attempt"].as_u64()),
        (Some("running"), Some(1))
    );
    assert!(
        std::fs::read_to_string(&out_a)
            .unwrap()
            .contains("uid=65534")
    );

    // A VC without an account on a root agent, and one whose account is missing.
    let no_account = submit_as(
        &c,
        ADMIN,
        json!({"gpus": 8, "vc": "c", "command": ["true"]}),
    );
    let missing = submit_as(
        &c,
        ADMIN,
        json!({"gpus": 8, "vc": "d", "command": ["true"]}),
    );
    let ends = c.wait_terminal(&[no_account, missing], Duration::from_secs(20));
    let tail = |j: &Value| {
        j["parts"][0]["output_tail"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(ends[0]["state"], "failed");
    assert!(
        tail(&ends[0]).contains("--run-as") && tail(&ends[0]).contains("VC c"),
        "{}",
        ends[0]
    );
    assert_eq!(ends[1]["state"], "failed");
    assert!(
        tail(&ends[1]).contains("no-such-user-apiary does not exist on node"),
        "{}",
        ends[1]
    );
    let (code, _) = call(
        "POST",
        &c.url(&format!("/v1/jobs/{a}/cancel")),
        Some(TENANT_A),
        None,
    );
    assert!(code < 300);
}

#[test]
fn two_vcs_sharing_an_account_is_a_config_error() {
    let dir = std::env::temp_dir().join(format!("apiary-shared-account-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("server.toml");
    std::fs::write(
        &cfg,
        "data_dir = \":memory:\"\n[[vcs]]\nname = \"a\"\nrun_as = \"nobody\"\n[[vcs]]\nname = \"b\"\nrun_as = \"nobody\"\n[[nodes]]\nname = \"n0\"\ngpus = 8\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["serve", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("vcs[1].run_as") && err.contains("VC a's account too"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
