//! The live service's figures, measured in-process: one scheduling pass at 10,000 GPUs
//! with thousands of jobs queued, and durable submissions per second over HTTP.

use anyhow::Result;
use std::path::Path;
use std::time::Instant;

/// Figures of the live service, measured in-process.
#[derive(Debug, serde::Serialize)]
pub struct LiveFigures {
    /// Scheduling pass with `pass_gpus` GPUs and `pass_queued` queued jobs: p50, µs.
    pub pass_p50_us: f64,
    /// p99, µs.
    pub pass_p99_us: f64,
    /// GPUs of that cluster.
    pub pass_gpus: u32,
    /// Jobs queued during the passes.
    pub pass_queued: usize,
    /// Submissions acknowledged per second over HTTP on loopback, each durable in the
    /// redb store before its 201.
    pub submit_per_s: f64,
    /// Concurrent clients.
    pub submit_clients: usize,
    /// The same, each durable on the etcd given to `apiary bench --etcd`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submit_etcd_per_s: Option<f64>,
    /// Scheduling pass placing GPU-sharing jobs on `pass_gpus` GPUs, after one of them
    /// ended, by packing (`best-fit` or a `share_policy`): (packing, p50 µs, p99 µs,
    /// jobs queued).
    pub share_pass: Vec<(String, f64, f64, usize)>,
}

fn live_config(nodes: u32, data_dir: &str) -> Result<apiary_server::config::ServerConfig> {
    config_with(nodes, data_dir, "")
}

/// [`live_config`] with `extra` top-level lines, every node with 96 cores and 768 GiB.
fn config_with(
    nodes: u32,
    data_dir: &str,
    extra: &str,
) -> Result<apiary_server::config::ServerConfig> {
    // One VC holds every benchmark job: lift the per-VC job limit past them.
    let mut t = format!(
        "policy = \"tiresias\"\nlisten = \"127.0.0.1:0\"\nlog_format = \"off\"\ndata_dir = \"{data_dir}\"\nmax_jobs_per_vc = 100000000\nmax_records_per_vc = 100000000\nmax_record_bytes_per_vc = 1000000000000\n{extra}\n"
    );
    for i in 0..nodes {
        t.push_str(&format!(
            "[[nodes]]\nname = \"n{i}\"\ngpus = 8\ncpus = 96\nmemory_gib = 768\n"
        ));
    }
    Ok(apiary_server::config::ServerConfig::parse(&t, "bench")?)
}

/// The live service's figures: one scheduling pass at 10,000 GPUs with 10,000 queued
/// jobs (Tiresias), and durable submissions per second over HTTP.
pub fn live(work: &Path, etcd: Option<&str>) -> Result<LiveFigures> {
    use apiary_server::core::Core;
    use apiary_server::types::JobSpec;
    // Pass latency: fill 10,000 GPUs, queue 10,000 more jobs, then time the pass after
    // each of 1,000 completions.
    let mut core = Core::new(live_config(1250, ":memory:")?, 0).map_err(anyhow::Error::msg)?;
    let sizes = [1u32, 1, 1, 1, 1, 1, 1, 2, 4, 8];
    let spec = |g: u32| -> JobSpec {
        serde_json::from_value(serde_json::json!({"gpus": g, "command": ["true"]})).expect("spec")
    };
    let mut ids = Vec::new();
    for i in 0..17_000u32 {
        ids.push(
            core.submit(spec(sizes[i as usize % sizes.len()]), 0)
                .map_err(|e| anyhow::anyhow!(e.message))?,
        );
    }
    core.schedule(0);
    let queued = core.queued();
    let times = pass_times(&mut core, &ids, 1000)?;
    let at = |p: f64| quantile(&times, p);
    // Submissions over HTTP, durable.
    let dir = work.join("live-bench");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let clients = 16;
    let submit_per_s = submissions(live_config(16, &dir.display().to_string())?, clients)?;
    let submit_etcd_per_s = match etcd {
        Some(url) => {
            let mut cfg = live_config(16, &dir.display().to_string())?;
            cfg.store = "etcd".into();
            cfg.etcd_endpoints = vec![url.to_string()];
            // A fresh prefix: each run measures submissions into an empty state.
            cfg.etcd_prefix = format!("apiary-bench/{}", std::process::id());
            Some(submissions(cfg, clients)?)
        }
        None => None,
    };
    let _ = std::fs::remove_dir_all(&dir);
    Ok(LiveFigures {
        pass_p50_us: at(0.5),
        pass_p99_us: at(0.99),
        pass_gpus: 10_000,
        pass_queued: queued,
        submit_per_s,
        submit_clients: clients,
        submit_etcd_per_s,
        share_pass: ["best-fit", "fgd", "gpu-packing"]
            .into_iter()
            .map(share_pass)
            .collect::<Result<_>>()?,
    })
}

/// Pass latency with GPU-sharing jobs: 10,000 GPUs filled by jobs of FGD's commonest
/// shapes, 30 % more queued, then the pass after each of 300 completions, packed by
/// `packing` (`best-fit`: the default).
fn share_pass(packing: &str) -> Result<(String, f64, f64, usize)> {
    use apiary_server::core::Core;
    use apiary_server::types::JobSpec;
    let extra = match packing {
        "best-fit" => String::new(),
        p => format!("share_policy = \"{p}\""),
    };
    let mut core =
        Core::new(config_with(1250, ":memory:", &extra)?, 0).map_err(anyhow::Error::msg)?;
    // Thousandths and cores, in the proportions of the commonest shapes.
    let shapes = [
        (500, 4),
        (250, 2),
        (1000 - 1, 8),
        (500, 4),
        (300, 2),
        (700, 6),
    ];
    let mut ids = Vec::new();
    let mut milli = 0u64;
    let mut i = 0;
    while milli < 13_000_000 {
        let (m, cores) = shapes[i % shapes.len()];
        i += 1;
        milli += m;
        let spec: JobSpec = serde_json::from_value(serde_json::json!({
            "gpus": 1, "gpu_milli": m, "cpu_milli": cores * 1000, "memory_mib": cores * 8192,
            "command": ["true"]
        }))?;
        ids.push(
            core.submit(spec, 0)
                .map_err(|e| anyhow::anyhow!(e.message))?,
        );
    }
    core.schedule(0);
    let queued = core.queued_shares();
    let times = pass_times(&mut core, &ids, 300)?;
    let at = |p: f64| quantile(&times, p);
    Ok((packing.to_string(), at(0.5), at(0.99), queued))
}

/// Scheduling-pass times, µs, sorted: the pass after each of `n` running jobs of `ids`
/// (in order) reports its end on every node it runs on.
fn pass_times(core: &mut apiary_server::core::Core, ids: &[u64], n: usize) -> Result<Vec<f64>> {
    let mut times = Vec::with_capacity(n);
    let mut now = 1000;
    for &id in ids {
        if times.len() == n {
            break;
        }
        let r = core
            .job(id)
            .map_err(|e| anyhow::anyhow!(e.message))?
            .clone();
        if r.state != apiary_server::types::JobState::Running {
            continue;
        }
        for p in &r.parts {
            core.heartbeat(&ended(&p.node, id, r.attempt), now)
                .map_err(|e| anyhow::anyhow!(e.message))?;
        }
        let t0 = Instant::now();
        core.schedule(now);
        times.push(t0.elapsed().as_secs_f64() * 1e6);
        now += 10;
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// The nearest-rank `p` quantile of sorted `times`.
fn quantile(times: &[f64], p: f64) -> f64 {
    times[((p * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1]
}

/// A heartbeat from `node` saying attempt `attempt` of job `job` ended well.
fn ended(node: &str, job: u64, attempt: u32) -> apiary_server::types::Heartbeat {
    use apiary_server::types::{Exit, Heartbeat};
    Heartbeat {
        node: node.to_string(),
        instance: "bench".into(),
        succeeds: None,
        replace: false,
        gpus: 8,
        running: Vec::new(),
        exited: vec![Exit {
            job,
            attempt,
            code: 0,
            lost: false,
            output_tail: String::new(),
        }],
        shutting_down: false,
        output: Vec::new(),
        hints: Vec::new(),
        online: Vec::new(),
    }
}

/// Durable submissions per second over HTTP on loopback from `clients` clients, to a
/// server with `cfg`.
fn submissions(cfg: apiary_server::config::ServerConfig, clients: usize) -> Result<f64> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (addr, stop) = rt.block_on(async {
        let store = apiary_server::service::open_store(&cfg, false)?;
        let (h, _task) =
            apiary_server::service::start(cfg, store, apiary_server::service::wall_clock()).await?;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = l.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(apiary_server::http::serve(l, h, Vec::new(), async {
            let _ = rx.await;
        }));
        anyhow::Ok((addr, tx))
    })?;
    let secs = 3.0;
    let t0 = Instant::now();
    let counts: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(|| {
                    let c = apiary_client::Client::new(
                        &format!("http://{addr}"),
                        std::time::Duration::from_secs(10),
                    );
                    let body = serde_json::json!({"gpus": 1, "command": ["true"]});
                    let mut n = 0u64;
                    while t0.elapsed().as_secs_f64() < secs {
                        if c.post::<_, serde_json::Value>("/v1/jobs", &body).is_ok() {
                            n += 1;
                        }
                    }
                    n
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or(0)).collect()
    });
    let elapsed = t0.elapsed().as_secs_f64();
    let _ = stop.send(());
    drop(rt);
    Ok(counts.iter().sum::<u64>() as f64 / elapsed)
}

/// How long a server takes to rebuild its state from the store at start: `jobs` jobs
/// (accepted through the service, so stored as it stores them) on `nodes` nodes, the
/// best of three starts. `etcd`: on that etcd instead of redb.
pub fn rebuild(work: &Path, nodes: u32, jobs: usize, etcd: Option<&str>) -> Result<f64> {
    let dir = work.join("rebuild-bench");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut cfg = live_config(nodes, &dir.display().to_string())?;
    if let Some(url) = etcd {
        cfg.store = "etcd".into();
        cfg.etcd_endpoints = vec![url.to_string()];
        cfg.etcd_prefix = format!("apiary-rebuild/{}", std::process::id());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let started = rt.block_on(async {
        let store = apiary_server::service::open_store(&cfg, false)?;
        let (h, task) =
            apiary_server::service::start(cfg.clone(), store, apiary_server::service::wall_clock())
                .await?;
        // Many submitters at once, so the service batches them as it does under load.
        let per = jobs.div_ceil(64);
        let mut tasks = Vec::new();
        for c in 0..64 {
            let h = h.clone();
            let n = per.min(jobs.saturating_sub(c * per));
            tasks.push(tokio::spawn(async move {
                let sizes = [1u32, 1, 1, 1, 2, 4, 8];
                for i in 0..n {
                    let spec: apiary_server::types::JobSpec = serde_json::from_value(
                        serde_json::json!({"gpus": sizes[i % sizes.len()], "command": ["true"]}),
                    )
                    .expect("spec");
                    h.submit(spec)
                        .await
                        .map_err(|e| anyhow::anyhow!(e.message))?;
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        drop(h);
        task.abort();
        let _ = task.await;
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t0 = Instant::now();
            let store = apiary_server::service::open_store(&cfg, false)?;
            let (h, task) = apiary_server::service::start(
                cfg.clone(),
                store,
                apiary_server::service::wall_clock(),
            )
            .await?;
            let n = h
                .read(|c| c.jobs(None, None, usize::MAX).len())
                .await
                .map_err(|e| anyhow::anyhow!(e.message))?;
            best = best.min(t0.elapsed().as_secs_f64());
            anyhow::ensure!(n == jobs, "rebuilt {n} jobs of {jobs}");
            drop(h);
            task.abort();
            let _ = task.await;
        }
        anyhow::Ok(best)
    });
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
    started
}
