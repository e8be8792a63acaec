//! Knobs a policy sets on running jobs, live: GoldMiner's CPUs for input pipelines (the
//! nodes' CPUs are the pool, each running job gets a share along its model's speed curve,
//! split over its nodes by GPUs) and GreenFlow's GPU power limits; every heartbeat reply
//! gives the node's agent the values of the attempts it runs.

mod common;

use apiary_server::config::ServerConfig;
use apiary_server::core::Core;
use apiary_server::types::*;
use common::hb;

/// Nodes a and b, 4 GPUs and `cpus` CPUs each.
fn config(
    policy: &str,
    cpus: Option<u32>,
) -> Result<ServerConfig, apiary_server::config::ConfigError> {
    let cpus = cpus.map_or(String::new(), |c| format!("cpus = {c}\n"));
    ServerConfig::parse(
        &format!(
            "policy = \"{policy}\"\ndata_dir = \":memory:\"\nheartbeat_interval_s = 1\n\
             node_timeout_s = 5\n[[nodes]]\nname = \"a\"\ngpus = 4\n{cpus}\
             [[nodes]]\nname = \"b\"\ngpus = 4\n{cpus}"
        ),
        "server.toml",
    )
}

fn job(gpus: u32, model: Option<&str>) -> JobSpec {
    serde_json::from_value(serde_json::json!({
        "gpus": gpus, "command": ["train"], "model": model,
    }))
    .unwrap()
}

/// The shares node `node`'s agent is told, running `running`.
fn shares(c: &mut Core, node: &str, running: &[(u64, u32)], now: u64) -> Vec<(u64, f64)> {
    let h = hb(node, running, &[]);
    let n = c.heartbeat(&h, now).unwrap();
    c.reply(n, &h)
        .cpus
        .iter()
        .map(|s| (s.job, (s.cpus * 1e9).round() / 1e9))
        .collect()
}

#[test]
fn goldminer_gives_running_jobs_the_pool_by_their_models_curves() {
    let mut c = Core::new(config("goldminer", Some(8)).unwrap(), 0).unwrap();
    // res18 on 2 GPUs, alone. Synergy's res18 speeds by CPUs per GPU (normalised to
    // 2.4): 0.37, 0.72, 1.0, 1.3, 1.53, 1.75 at 1..6, and 2.4 at 9. Every stretch gains,
    // so it takes 2 CPUs per stretch up to 6 per GPU (12), then 4 of the 6 the stretch
    // to 9 per GPU would take: all 16.
    let x = c.submit(job(2, Some("resnet18")), 0).unwrap();
    c.schedule(0);
    let rx = c.job(x).unwrap();
    assert_eq!(rx.state, JobState::Running);
    assert_eq!(rx.cpus, Some(16.0));
    let node = rx.parts[0].node.clone();
    assert_eq!(rx.parts.len(), 1);
    assert_eq!(shares(&mut c, &node, &[], 100), vec![(x, 16.0)]);
    // bert on 1 GPU: its speed is full at 1 CPU per GPU (slope 1, above any of res18's
    // 0.15 and less), so it takes 1 first; res18 keeps the other 15.
    let y = c.submit(job(1, Some("bert")), 1_000).unwrap();
    c.schedule(1_000);
    let ry = c.job(y).unwrap();
    assert_eq!(ry.state, JobState::Running);
    assert_eq!(ry.cpus, Some(1.0));
    assert_eq!(c.job(x).unwrap().cpus, Some(15.0));
    let y_node = ry.parts[0].node.clone();
    let mut on_x_node = vec![(x, 15.0)];
    if y_node == node {
        on_x_node.push((y, 1.0));
    }
    assert_eq!(shares(&mut c, &node, &[(x, 1)], 1_100), on_x_node);
    // bert ends: res18 has all 16 again, and its agent is told so with its next reply.
    let yn = c.heartbeat(&hb(&y_node, &[], &[(y, 1, 0)]), 2_000).unwrap();
    assert!(yn < 2);
    c.schedule(2_000);
    assert_eq!(c.job(y).unwrap().state, JobState::Succeeded);
    assert_eq!(c.job(y).unwrap().cpus, None);
    assert_eq!(c.job(x).unwrap().cpus, Some(16.0));
    assert_eq!(shares(&mut c, &node, &[(x, 1)], 2_100), vec![(x, 16.0)]);
}

#[test]
fn a_job_the_pool_has_nothing_left_for_still_gets_a_share_of_zero() {
    // One CPU a node: 2 in the pool. ResNet-18 alone takes both; BERT on 4 GPUs gains
    // 1 per CPU per GPU, more than ResNet-18 from any, and takes both.
    let mut c = Core::new(config("goldminer", Some(1)).unwrap(), 0).unwrap();
    let x = c.submit(job(1, Some("res18")), 0).unwrap();
    c.schedule(0);
    assert_eq!(c.job(x).unwrap().cpus, Some(2.0));
    let y = c.submit(job(4, Some("bert")), 1_000).unwrap();
    c.schedule(1_000);
    assert_eq!(c.job(y).unwrap().cpus, Some(2.0));
    // Zero, not none: its agent pins it to one CPU instead of leaving it all of them.
    assert_eq!(c.job(x).unwrap().cpus, Some(0.0));
    let node = c.job(x).unwrap().parts[0].node.clone();
    assert!(shares(&mut c, &node, &[(x, 1)], 1_100).contains(&(x, 0.0)));
}

#[test]
fn a_gang_over_two_nodes_is_split_by_its_gpus_there() {
    let mut c = Core::new(config("goldminer", Some(8)).unwrap(), 0).unwrap();
    // res50 on all 8 GPUs: its speed is full at 4 CPUs per GPU (1.15 of 1.15),
    // so it takes 8 GPUs x 4 = 32 > 16: the whole pool, 8 CPUs a node.
    let x = c.submit(job(8, Some("res50")), 0).unwrap();
    c.schedule(0);
    assert_eq!(c.job(x).unwrap().cpus, Some(16.0));
    assert_eq!(shares(&mut c, "a", &[], 100), vec![(x, 8.0)]);
    assert_eq!(shares(&mut c, "b", &[], 100), vec![(x, 8.0)]);
}

#[test]
fn submissions_name_a_measured_model_and_nodes_their_cpus() {
    let mut c = Core::new(config("goldminer", Some(8)).unwrap(), 0).unwrap();
    let e = c.submit(job(1, None), 0).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("model"));
    assert!(e.message.contains("--model NAME"), "{}", e.message);
    assert!(e.message.contains("res18, res50"), "{}", e.message);
    let e = c.submit(job(1, Some("gpt-9")), 0).unwrap_err();
    assert_eq!(e.message.split(" (").next(), Some("unknown model 'gpt-9'"));
    // Other policies take a model and ignore it, and need none.
    let mut fifo = Core::new(config("fifo", None).unwrap(), 0).unwrap();
    let f = fifo.submit(job(1, Some("res50")), 0).unwrap();
    fifo.schedule(0);
    assert_eq!(fifo.job(f).unwrap().cpus, None);
    assert!(shares(&mut fifo, "a", &[], 100).is_empty());
    fifo.submit(job(1, None), 0).unwrap();
    // GoldMiner's pool is the nodes' CPUs: a node without `cpus` is named.
    let e = config("goldminer", None).unwrap_err().to_string();
    assert!(e.contains("nodes[0].cpus"), "{e}");
    assert!(e.contains("declare every node's `cpus`"), "{e}");
}

/// GreenFlow's power limits live, in the case the simulator's carbon tests work by
/// hand: a ResNet-50 (Zeus on a V100 at 60 %: 1.169x the time at 0.654x the power) in a
/// clean hour with no budget runs on two GPUs capped at 60 %, and the agent of its node
/// is told so; once the job ends, it is told nothing (its GPUs go back to default).
#[test]
fn greenflow_caps_a_jobs_gpus_and_its_agent_is_told() {
    use apiary_model::energy::Intensity;
    let cfg = common::two_nodes(
        "greenflow",
        r#"params = { overhead = "false", budget_kg = "0", power_limits = "1,0.6" }"#,
    )
    .unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    c.set_carbon(Intensity::new("alternating", vec![100.0, 300.0], 0).anchored(0));
    let spec: JobSpec = serde_json::from_value(serde_json::json!({
        "gpus": 2, "command": ["train"], "estimated_duration_s": 10800, "model": "resnet50",
        "elastic": {"min_gpus": 1, "max_gpus": 2, "throughput": [[1, 1.0], [2, 1.8]]},
    }))
    .unwrap();
    let e = c.submit(spec, 0).unwrap();
    c.schedule(0);
    let r = c.job(e).unwrap();
    assert_eq!(r.state, JobState::Running);
    assert_eq!(r.parts.iter().map(|p| p.gpus.len()).sum::<usize>(), 2);
    assert_eq!(r.power_limit, Some(0.6));
    let node = r.parts[0].node.clone();
    let h = hb(&node, &[], &[]);
    let n = c.heartbeat(&h, 100).unwrap();
    let caps = c.reply(n, &h).power;
    assert_eq!(
        caps,
        vec![PowerCap {
            job: e,
            attempt: 1,
            fraction: 0.6
        }]
    );
    c.heartbeat(&hb(&node, &[], &[(e, 1, 0)]), 200).unwrap();
    c.schedule(200);
    assert_eq!(c.job(e).unwrap().power_limit, None);
    let n = c.heartbeat(&h, 300).unwrap();
    assert!(c.reply(n, &h).power.is_empty());
}

fn read(gpus: u32, model: &str, dataset_gb: f64) -> JobSpec {
    serde_json::from_value(serde_json::json!({
        "gpus": gpus, "command": ["train"], "model": model, "dataset_gb": dataset_gb,
    }))
    .unwrap()
}

fn io_of(c: &Core, id: u64) -> (f64, f64) {
    let io = c.job(id).unwrap().io.unwrap();
    // GB and MB/s, to 3 places.
    let r = |x: f64| (x * 1e3).round() / 1e3;
    (r(io.cache_bytes / 1e9), r(io.remote_bytes_per_s / 1e6))
}

/// SiloD live on the default storage (25 GB of cache and 20 MB/s of remote bandwidth a
/// GPU: 200 GB and 160 MB/s for the 8 GPUs). Its shares reach the records and each
/// node's agent, and a job's cache is taken as warm at its share once given.
#[test]
fn silod_gives_cache_by_efficiency_and_water_fills_bandwidth() {
    let mut c = Core::new(common::two_nodes("silod", "").unwrap(), 0).unwrap();
    // ResNet-50 (Synergy: 512 samples x 1.15 / 0.78 s a GPU; ImageNet's 110 KB) on 4
    // GPUs reads 332.07 MB/s at full speed. Its 140 GB fit the cache whole. Cold, it
    // needs all 332 MB/s and gets the whole 160.
    let x = c.submit(read(4, "resnet50", 140.0), 0).unwrap();
    c.schedule(0);
    assert_eq!(io_of(&c, x), (140.0, 160.0));
    // Taken as warm, it hits every read: the pass it asked for gives it no bandwidth.
    assert_eq!(c.wake(), Some(0));
    c.schedule(0);
    assert_eq!(io_of(&c, x), (140.0, 0.0));
    // BERT (20 x 1 / 0.011 s a GPU; 2 KB sequences) on 4 GPUs reads 14.545 MB/s. Its
    // cache efficiency (14.5 MB/s over 100 GB) is below ResNet-50's (332 over 140), so
    // it gets the 60 GB left; cold, it needs all 14.545 MB/s, which water-filling
    // gives; warm at 60 %, 40 % of it: 5.818.
    let y = c.submit(read(4, "bert", 100.0), 1_000).unwrap();
    c.schedule(1_000);
    assert_eq!(io_of(&c, y), (60.0, 14.545));
    c.schedule(1_000);
    assert_eq!(io_of(&c, y), (60.0, 5.818));
    assert_eq!(io_of(&c, x), (140.0, 0.0));
    // Each job runs on one node: its agent is told the whole share.
    let node = c.job(y).unwrap().parts[0].node.clone();
    let h = hb(&node, &[(y, 1)], &[]);
    let n = c.heartbeat(&h, 1_100).unwrap();
    let grants = c.reply(n, &h).io;
    assert_eq!(grants.len(), 1);
    assert_eq!((grants[0].job, grants[0].share.cache_bytes), (y, 60e9));
    // What it reads is a required part of the submission, and checked.
    let e = c.submit(job(1, Some("bert")), 2_000).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("dataset_gb"));
    assert!(e.message.contains("--dataset-gb SIZE"), "{}", e.message);
    let e = c.submit(read(1, "bert", -1.0), 2_000).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("dataset_gb"));
}

/// A heartbeat from node `node` whose agent measured `loads` (GPU, SM, memory) of the
/// online services, running `running`, with `exited` to report.
fn measured(
    node: &str,
    loads: &[(u32, f64, f64)],
    running: &[(u64, u32)],
    exited: &[(u64, u32, i32)],
) -> Heartbeat {
    let mut h = hb(node, running, exited);
    h.online = loads
        .iter()
        .map(|&(gpu, sm, memory)| ServiceLoad { gpu, sm, memory })
        .collect();
    h
}

/// MuxFlow live: node a's 4 GPUs serve online services, node b's are offline. What a's
/// agent measures is what MuxFlow decides by; its SM shares go to the job's agent, and
/// a spike evicts the job (stopped, queued again).
#[test]
fn muxflow_shares_serving_gpus_by_the_loads_agents_measure() {
    let cfg = common::two_nodes("muxflow", "online_nodes = 1").unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    let loads = [(0, 0.6, 0.3), (1, 0.2, 0.2), (2, 0.9, 0.5), (3, 0.5, 0.1)];
    let h = measured("a", &loads, &[], &[]);
    let n = c.heartbeat(&h, 0).unwrap();
    assert!(
        c.reply(n, &h).measure_online,
        "a's agent is asked to measure"
    );
    let hb_b = hb("b", &[], &[]);
    let nb = c.heartbeat(&hb_b, 0).unwrap();
    assert!(!c.reply(nb, &hb_b).measure_online);
    // A 4-GPU job takes the offline node b.
    let x = c.submit(job(4, None), 0).unwrap();
    c.schedule(0);
    assert_eq!(c.job(x).unwrap().parts[0].node, "b");
    assert_eq!(c.job(x).unwrap().sm_share, None);
    // A 1-GPU job finds no offline GPU and is matched to a serving one by predicted
    // speed, share x (1 - 0.2 x demand) with share = 1 - demand - 0.05 headroom:
    // GPU 1 gives 0.75 x 0.96 = 0.72, GPU 3 0.45 x 0.9, GPU 0 0.35 x 0.88; GPU 2
    // would leave 0.05, under min_share 0.1.
    let y = c.submit(job(1, None), 1_000).unwrap();
    c.schedule(1_000);
    let ry = c.job(y).unwrap();
    assert_eq!(
        (ry.parts[0].node.as_str(), ry.parts[0].gpus.clone()),
        ("a", vec![1])
    );
    assert_eq!(ry.sm_share, Some(0.75));
    let h = measured("a", &loads, &[(y, 1)], &[]);
    let n = c.heartbeat(&h, 1_100).unwrap();
    let sm = c.reply(n, &h).sm;
    assert_eq!(sm.len(), 1);
    // Its memory quota is what GPU 1's service leaves: 80 %.
    assert_eq!((sm[0].job, sm[0].share, sm[0].memory), (y, 0.75, 0.8));
    // The service on GPU 1 falls to 0.1: the next pass gives the job 0.85.
    let calmer = [(0, 0.6, 0.3), (1, 0.1, 0.2), (2, 0.9, 0.5), (3, 0.5, 0.1)];
    c.heartbeat(&measured("a", &calmer, &[(y, 1)], &[]), 2_000)
        .unwrap();
    c.schedule(2_000);
    assert_eq!(c.job(y).unwrap().sm_share, Some(0.85));
    // It spikes to 0.4, more than the 0.15 the job left it: the job is evicted.
    let spike = [(0, 0.6, 0.3), (1, 0.4, 0.2), (2, 0.9, 0.5), (3, 0.5, 0.1)];
    c.heartbeat(&measured("a", &spike, &[(y, 1)], &[]), 3_000)
        .unwrap();
    c.schedule(3_000);
    let ry = c.job(y).unwrap();
    assert_eq!(ry.state, JobState::Queued);
    assert_eq!(ry.history.last().unwrap().event, "preempted");
    let h = measured("a", &spike, &[(y, 1)], &[]);
    let n = c.heartbeat(&h, 3_100).unwrap();
    assert_eq!(c.reply(n, &h).stop, vec![AttemptRef { job: y, attempt: 1 }]);
    // Once its process ended, it goes back to GPU 1, now the fastest at 0.55 x 0.92.
    c.heartbeat(&measured("a", &spike, &[], &[(y, 1, -1)]), 4_000)
        .unwrap();
    c.schedule(4_000);
    let ry = c.job(y).unwrap();
    let share = ry.sm_share.map(|s| (s * 1e9).round() / 1e9);
    assert_eq!(
        (ry.state, ry.attempt, share),
        (JobState::Running, 2, Some(0.55))
    );
    // Reports of an offline node's GPUs are not taken.
    c.heartbeat(&measured("b", &[(0, 0.99, 0.9)], &[(x, 1)], &[]), 4_100)
        .unwrap();
    c.schedule(4_100);
    let again = c.job(y).unwrap().sm_share.map(|s| (s * 1e9).round() / 1e9);
    assert_eq!(again, Some(0.55));
}
