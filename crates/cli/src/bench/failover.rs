//! Fail-over on etcd, as `apiary bench --etcd URL` measures it: two `apiary serve`
//! processes on one prefix with a 2 s leader lease; the leader is killed (SIGKILL) and
//! timed until the other answers as leader, then started again to follow, round after
//! round. Needs a build with `--features etcd` (the servers are this binary).

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Seconds of leader lease the servers run with.
pub const LEASE_S: f64 = 2.0;

/// Fail-over times, seconds, in round order.
pub fn failover(exe: &Path, work: &Path, etcd: &str, rounds: usize) -> Result<Vec<f64>> {
    let dir = work.join("failover-bench");
    let _ = std::fs::remove_dir_all(&dir);
    let prefix = format!("apiary-failover/{}", std::process::id());
    let ports = [free_port()?, free_port()?];
    let start = |k: usize| -> Result<Child> {
        let d = dir.join(format!("s{k}"));
        std::fs::create_dir_all(&d)?;
        let cfg = d.join("server.toml");
        std::fs::write(
            &cfg,
            format!(
                "listen = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\nstore = \"etcd\"\n\
                 etcd_endpoints = [\"{etcd}\"]\netcd_prefix = \"{prefix}\"\nleader_lease_s = {LEASE_S}\n\
                 log_format = \"off\"\n[[nodes]]\nname = \"n0\"\ngpus = 8\n",
                ports[k],
                d.join("data").display()
            ),
        )?;
        Command::new(exe)
            .args(["serve", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting apiary serve")
    };
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(2)))
            .build(),
    );
    let status = |k: usize| -> Option<u16> {
        let r = agent
            .get(&format!("http://127.0.0.1:{}/v1/cluster", ports[k]))
            .call()
            .ok()?;
        Some(r.status().as_u16())
    };
    let wait = |what: &str, ok: &dyn Fn() -> bool| -> Result<()> {
        let t0 = Instant::now();
        while !ok() {
            if t0.elapsed() > Duration::from_secs(30) {
                bail!("fail-over bench: {what} not within 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    };
    let mut servers = vec![start(0)?];
    wait("the first server leads", &|| status(0) == Some(200))?;
    servers.push(start(1)?);
    wait("the second server follows", &|| status(1) == Some(503))?;
    let mut times = Vec::new();
    let mut leader = 0;
    let result = (|| -> Result<()> {
        for round in 0..rounds {
            // Kill at a different point of the renewal cycle each round.
            std::thread::sleep(Duration::from_millis(500 + 137 * round as u64 % 700));
            servers[leader].kill()?;
            let t0 = Instant::now();
            let _ = servers[leader].wait();
            let other = 1 - leader;
            wait("the other server leads", &|| status(other) == Some(200))?;
            times.push(t0.elapsed().as_secs_f64());
            servers[leader] = start(leader)?;
            let back = leader;
            wait("the killed server follows again", &|| {
                status(back) == Some(503)
            })?;
            leader = other;
        }
        Ok(())
    })();
    for s in &mut servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    result.map(|()| times)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
