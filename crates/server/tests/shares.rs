//! Jobs that share GPUs, live: packing by best fit, CPU and memory per node, holds that
//! last until the processes ended, node loss, drain, time limits and recovery. Every
//! placement below is worked out by hand from the rule in `core/shares.rs`.

mod common;

use apiary_server::config::ServerConfig;
use apiary_server::core::Core;
use apiary_server::types::*;
use common::hb;

/// Nodes `a` (4 GPUs of 80 GiB, 8 cores, 32 GiB) and `b` (4 GPUs, nothing declared).
fn config(policy: &str) -> ServerConfig {
    config_with(policy, "", "")
}

/// [`config`] with `extra` lines at top level and `b_has` lines in node b's table.
fn config_with(policy: &str, extra: &str, b_has: &str) -> ServerConfig {
    ServerConfig::parse(
        &format!(
            r#"policy = "{policy}"
{extra}
data_dir = ":memory:"
heartbeat_interval_s = 1
node_timeout_s = 5
grace_s = 2
[[nodes]]
name = "a"
gpus = 4
cpus = 8
memory_gib = 32
gpu_memory_gib = 80
[[nodes]]
name = "b"
gpus = 4
{b_has}
"#
        ),
        "server.toml",
    )
    .unwrap()
}

fn whole(gpus: u32) -> JobSpec {
    serde_json::from_value(serde_json::json!({"gpus": gpus, "command": ["true"]})).unwrap()
}

fn share(milli: u32) -> JobSpec {
    JobSpec {
        gpu_milli: Some(milli),
        ..whole(1)
    }
}

/// Where job `id` runs: (node, GPU, thousandths).
fn at(c: &Core, id: u64) -> (String, u32, Option<u32>) {
    let r = c.job(id).unwrap();
    assert_eq!(r.state, JobState::Running, "job {id}");
    (
        r.parts[0].node.clone(),
        r.parts[0].gpus[0],
        r.parts[0].gpu_milli,
    )
}

/// Node `n`'s shared GPUs as (GPU, thousandths used, holders' job ids).
fn shares(c: &Core, n: &str) -> Vec<(u32, u32, Vec<u64>)> {
    let node = c.nodes().into_iter().find(|x| x.name == n).unwrap();
    node.shares
        .iter()
        .map(|s| {
            (
                s.gpu,
                s.used_milli,
                s.holders.iter().map(|h| h.job).collect(),
            )
        })
        .collect()
}

fn free(c: &Core, n: &str) -> u32 {
    c.nodes()
        .into_iter()
        .find(|x| x.name == n)
        .unwrap()
        .free_gpus
}

#[test]
fn halves_share_one_gpu_and_whole_jobs_never_land_on_a_shared_one() {
    let mut c = Core::new(config("fifo"), 0).unwrap();
    let s1 = c.submit(share(500), 0).unwrap();
    let s2 = c.submit(share(500), 0).unwrap();
    let s3 = c.submit(share(300), 0).unwrap();
    c.schedule(0);
    // s1 opens GPU 0 of a (both nodes have 4 free: the first), s2 fills it exactly, s3
    // finds no room there and opens a's next GPU (a has fewer free GPUs than b).
    assert_eq!(at(&c, s1), ("a".into(), 0, Some(500)));
    assert_eq!(at(&c, s2), ("a".into(), 0, Some(500)));
    assert_eq!(at(&c, s3), ("a".into(), 1, Some(300)));
    assert_eq!(
        shares(&c, "a"),
        vec![(0, 1000, vec![s1, s2]), (1, 300, vec![s3])]
    );
    assert_eq!(free(&c, "a"), 2);
    // The policy never saw them: nothing pending or running in its world.
    assert_eq!(c.counts(), (0, 0));
    assert_eq!(c.cluster().gpus_allocated, 2);
    // Whole-GPU jobs get only free GPUs: 4 on b, and 3 do not fit beside the shares.
    let w = c.submit(whole(4), 1).unwrap();
    let w2 = c.submit(whole(3), 1).unwrap();
    c.schedule(1);
    assert_eq!(c.job(w).unwrap().parts[0].node, "b");
    assert_eq!(c.job(w2).unwrap().state, JobState::Queued);
    assert_eq!(
        c.shown(c.job(w2).unwrap()).reason.as_deref(),
        Some("Resources")
    );
    // Node a's agent starts the three on their GPUs with their shares.
    let first = hb("a", &[], &[]);
    let n = c.heartbeat(&first, 2).unwrap();
    let start = c.reply(n, &first).start;
    type Started = (u64, Vec<u32>, Option<u32>, Option<u64>);
    let got: Vec<Started> = start
        .iter()
        .map(|l| (l.job, l.gpus.clone(), l.gpu_milli, l.gpu_memory_mib))
        .collect();
    assert_eq!(
        got,
        vec![
            (s1, vec![0], Some(500), Some(40_960)),
            (s2, vec![0], Some(500), Some(40_960)),
            (s3, vec![1], Some(300), Some(24_576)),
        ]
    );
    c.heartbeat(&hb("a", &[(s1, 1), (s2, 1), (s3, 1)], &[]), 3)
        .unwrap();
    // s1 ends: GPU 0 stays shared by s2; then s2 ends and it is free again.
    c.heartbeat(&hb("a", &[(s2, 1), (s3, 1)], &[(s1, 1, 0)]), 4)
        .unwrap();
    assert_eq!(c.job(s1).unwrap().state, JobState::Succeeded);
    assert_eq!(
        shares(&c, "a"),
        vec![(0, 500, vec![s2]), (1, 300, vec![s3])]
    );
    c.schedule(4);
    assert_eq!(c.job(w2).unwrap().state, JobState::Queued);
    c.heartbeat(&hb("a", &[(s3, 1)], &[(s2, 1, 0)]), 5).unwrap();
    assert_eq!(shares(&c, "a"), vec![(1, 300, vec![s3])]);
    c.schedule(5);
    let r = c.job(w2).unwrap();
    assert_eq!(r.state, JobState::Running);
    assert_eq!(
        (r.parts[0].node.as_str(), r.parts[0].gpus.clone()),
        ("a", vec![0, 2, 3])
    );
}

#[test]
fn best_fit_takes_the_fullest_gpu_that_holds_the_share() {
    let mut c = Core::new(config("fifo"), 0).unwrap();
    let big = c.submit(share(700), 0).unwrap();
    let mid = c.submit(share(400), 0).unwrap();
    c.schedule(0);
    assert_eq!(at(&c, big), ("a".into(), 0, Some(700)));
    assert_eq!(at(&c, mid), ("a".into(), 1, Some(400)));
    // 300 fits both (300 left on GPU 0, 600 on GPU 1): the fuller one, leaving nothing.
    let small = c.submit(share(300), 1).unwrap();
    // 500 fits only GPU 1.
    let half = c.submit(share(500), 1).unwrap();
    c.schedule(1);
    assert_eq!(at(&c, small), ("a".into(), 0, Some(300)));
    assert_eq!(at(&c, half), ("a".into(), 1, Some(500)));
    assert_eq!(
        shares(&c, "a"),
        vec![(0, 1000, vec![big, small]), (1, 900, vec![mid, half])]
    );
}

#[test]
fn cpu_and_memory_bound_what_shares_a_node() {
    let mut c = Core::new(config("fifo"), 0).unwrap();
    let ask = |milli, cpu, mem| JobSpec {
        cpu_milli: Some(cpu),
        memory_mib: Some(mem),
        ..share(milli)
    };
    // a has 8 cores and 32 GiB for its shares; b declares neither.
    let x = c.submit(ask(100, 6000, 1024), 0).unwrap();
    let y = c.submit(ask(100, 3000, 1024), 0).unwrap();
    let z = c.submit(ask(100, 2000, 31 * 1024), 0).unwrap();
    c.schedule(0);
    assert_eq!(at(&c, x), ("a".into(), 0, Some(100)));
    // y would take a to 9 cores: it opens a GPU on b instead.
    assert_eq!(at(&c, y), ("b".into(), 0, Some(100)));
    // z takes a to exactly its 8 cores and 32 GiB: it fits.
    assert_eq!(at(&c, z), ("a".into(), 0, Some(100)));
    let over = c.submit(ask(100, 0, 1), 1).unwrap();
    c.schedule(1);
    assert_eq!(at(&c, over).0, "b", "a's memory is all taken");
    // Asks no node could ever meet, and asks that make no sense, are refused.
    let field = |c: &mut Core, s: JobSpec| c.submit(s, 2).unwrap_err().field;
    assert_eq!(field(&mut c, share(1000)).as_deref(), Some("gpu_milli"));
    assert_eq!(field(&mut c, share(0)).as_deref(), Some("gpu_milli"));
    assert_eq!(
        field(
            &mut c,
            JobSpec {
                gpus: 2,
                ..share(500)
            }
        )
        .as_deref(),
        Some("gpus")
    );
    assert_eq!(
        field(
            &mut c,
            JobSpec {
                cpu_milli: Some(1000),
                ..whole(1)
            }
        )
        .as_deref(),
        Some("cpu_milli")
    );
    assert_eq!(
        field(
            &mut c,
            JobSpec {
                memory_mib: Some(1),
                ..whole(1)
            }
        )
        .as_deref(),
        Some("memory_mib")
    );
    let only_a = JobSpec {
        gpu_type: Some("GPU".into()),
        ..ask(100, u64::MAX, 0)
    };
    assert_eq!(field(&mut c, only_a).as_deref(), Some("cpu_milli"));
}

#[test]
fn a_share_is_held_until_its_process_ended_so_no_gpu_is_overcommitted() {
    let mut c = Core::new(config("fifo"), 0).unwrap();
    let s1 = c.submit(share(600), 0).unwrap();
    c.schedule(0);
    c.heartbeat(&hb("a", &[(s1, 1)], &[]), 1).unwrap();
    c.cancel(s1, 2).unwrap();
    assert_eq!(c.job(s1).unwrap().state, JobState::Cancelled);
    // Its process still runs: 600 stay held, so a new 600 opens another GPU.
    let s2 = c.submit(share(600), 2).unwrap();
    c.schedule(2);
    assert_eq!(at(&c, s2), ("a".into(), 1, Some(600)));
    assert_eq!(shares(&c, "a")[0], (0, 600, vec![s1]));
    // The record keeps the stopping process (a restart would hold it too).
    let stopping = c
        .take_dirty()
        .jobs
        .into_iter()
        .find(|r| r.id == s1)
        .unwrap()
        .stopping;
    assert_eq!(stopping.len(), 1);
    assert_eq!(
        (stopping[0].node.as_str(), stopping[0].gpus.clone()),
        ("a", vec![0])
    );
    let h = hb("a", &[(s1, 1)], &[]);
    let n = c.heartbeat(&h, 3).unwrap();
    assert_eq!(
        c.reply(n, &h).stop,
        vec![AttemptRef {
            job: s1,
            attempt: 1
        }]
    );
    c.heartbeat(&hb("a", &[(s2, 1)], &[(s1, 1, -1)]), 4)
        .unwrap();
    assert_eq!(shares(&c, "a"), vec![(1, 600, vec![s2])]);
    assert_eq!(c.job(s1).unwrap().parts[0].exit, Some(-1));
    // Cancelled before its agent ever ran it: the next heartbeat without it frees it.
    let s3 = c.submit(share(300), 5).unwrap();
    c.schedule(5);
    assert_eq!(at(&c, s3), ("a".into(), 1, Some(300)));
    c.cancel(s3, 6).unwrap();
    c.heartbeat(&hb("a", &[(s2, 1)], &[]), 7).unwrap();
    assert_eq!(shares(&c, "a"), vec![(1, 600, vec![s2])]);
}

#[test]
fn a_drained_share_waits_for_its_process_before_running_again() {
    let mut c = Core::new(config("fifo"), 0).unwrap();
    let s = c.submit(share(500), 0).unwrap();
    c.schedule(0);
    c.heartbeat(&hb("a", &[(s, 1)], &[]), 1).unwrap();
    c.heartbeat(&hb("b", &[], &[]), 1).unwrap();
    assert_eq!(c.drain("a", 2).unwrap(), 1);
    assert_eq!(c.job(s).unwrap().state, JobState::Queued);
    c.schedule(2);
    assert_eq!(
        c.job(s).unwrap().state,
        JobState::Queued,
        "attempt 1 still runs on a: never two at once"
    );
    c.heartbeat(&hb("a", &[], &[(s, 1, -1)]), 3).unwrap();
    c.schedule(3);
    let r = c.job(s).unwrap();
    assert_eq!((r.attempt, at(&c, s)), (2, ("b".into(), 0, Some(500))));
}

#[test]
fn a_share_on_a_lost_node_runs_again_elsewhere_after_the_grace_period() {
    let mut c = Core::new(config("fifo"), 0).unwrap();
    let s = c.submit(share(250), 0).unwrap();
    c.schedule(0);
    c.heartbeat(&hb("a", &[(s, 1)], &[]), 500).unwrap();
    c.heartbeat(&hb("b", &[], &[]), 6000).unwrap();
    c.check_nodes(6000);
    assert_eq!(
        c.job(s).unwrap().state,
        JobState::Running,
        "within the grace"
    );
    c.heartbeat(&hb("b", &[], &[]), 7600).unwrap();
    c.check_nodes(7600);
    assert_eq!(c.job(s).unwrap().state, JobState::Queued);
    assert!(shares(&c, "a").is_empty(), "given up with its node");
    c.schedule(7600);
    assert_eq!(at(&c, s), ("b".into(), 0, Some(250)));
    assert_eq!(c.job(s).unwrap().attempt, 2);
}

#[test]
fn a_share_past_its_time_limit_fails_with_timeout() {
    let mut c = Core::new(config("fifo"), 0).unwrap();
    let s = c
        .submit(
            JobSpec {
                time_limit_s: Some(10.0),
                ..share(500)
            },
            0,
        )
        .unwrap();
    c.schedule(0);
    assert!(!c.check_time_limits(9_999));
    assert!(c.check_time_limits(10_000));
    let r = c.job(s).unwrap();
    assert_eq!(
        (r.state, r.history.last().unwrap().event.as_str()),
        (JobState::Failed, "timeout")
    );
    assert_eq!(shares(&c, "a"), vec![(0, 500, vec![s])], "until it stopped");
}

#[test]
fn recovery_takes_back_running_shares_and_stopping_processes() {
    let mut c = Core::new(config("fifo"), 0).unwrap();
    let s1 = c.submit(share(400), 0).unwrap();
    let s2 = c.submit(share(400), 0).unwrap();
    let q = c.submit(share(300), 0).unwrap();
    c.schedule(0);
    c.heartbeat(&hb("a", &[(s1, 1), (s2, 1), (q, 1)], &[]), 1)
        .unwrap();
    c.cancel(s2, 2).unwrap();
    let d = c.take_dirty();
    let mut r = Core::new(config("fifo"), 10).unwrap();
    r.recover(d.jobs, d.next_id.unwrap(), &Default::default(), 10);
    assert_eq!(shares(&r, "a"), shares(&c, "a"));
    assert_eq!(
        shares(&r, "a"),
        vec![(0, 800, vec![s1, s2]), (1, 300, vec![q])]
    );
    // The stopping one is still told to stop, and its end frees its share.
    let h = hb("a", &[(s1, 1), (s2, 1), (q, 1)], &[]);
    let n = r.heartbeat(&h, 11).unwrap();
    assert_eq!(
        r.reply(n, &h).stop,
        vec![AttemptRef {
            job: s2,
            attempt: 1
        }]
    );
    r.heartbeat(&hb("a", &[(s1, 1), (q, 1)], &[(s2, 1, -1)]), 12)
        .unwrap();
    assert_eq!(shares(&r, "a"), vec![(0, 400, vec![s1]), (1, 300, vec![q])]);
}

#[test]
fn sharing_is_refused_beside_vc_sharing_rules() {
    let cfg = ServerConfig::parse(
        r#"policy = "fifo"
data_dir = ":memory:"
sharing = "quota"
[[vcs]]
name = "default"
quota_gpus = 4
[[nodes]]
name = "a"
gpus = 4
"#,
        "server.toml",
    )
    .unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    let e = c.submit(share(500), 0).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("gpu_milli"));
    assert!(e.message.contains("quota"), "{}", e.message);
}

/// A node agent as the tests model one: the processes it runs, each with its GPUs and
/// share, and the exits it has yet to report.
/// A process asked to stop ends a few steps later, as SIGTERM takes its time.
#[derive(Default)]
struct Agent {
    running: Vec<(u64, u32, Vec<u32>, Option<u32>)>,
    exited: Vec<(u64, u32, i32)>,
    /// (job, attempt, steps left) of processes stopping.
    stopping: Vec<(u64, u32, u64)>,
}

/// Checks what no workload may ever do on a node: hold more than a whole GPU, put a
/// whole-GPU process beside any other on its GPU, or run two attempts of one job.
fn assert_safe(agents: &[(&str, Agent)], step: usize) {
    let mut attempts = std::collections::BTreeMap::new();
    for (name, a) in agents {
        let mut per_gpu: std::collections::BTreeMap<u32, (u32, u32)> = Default::default();
        for (job, attempt, gpus, milli) in &a.running {
            if let Some(other) = attempts.insert(*job, *attempt) {
                assert_eq!(other, *attempt, "step {step}: job {job} runs twice");
            }
            for g in gpus {
                let e = per_gpu.entry(*g).or_default();
                e.0 += milli.unwrap_or(1000);
                e.1 += 1;
                assert!(
                    e.0 <= 1000 && (milli.is_some() || e.1 == 1),
                    "step {step}: GPU {g} of {name} overcommitted: {:?}",
                    a.running
                );
            }
        }
    }
}

#[test]
fn random_workloads_never_overcommit_a_gpu_or_run_a_job_twice() {
    for seed in 1..=40u64 {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let policy = ["fifo", "tiresias"][seed as usize % 2];
        // The best fit by GPU, or one of FGD's six (which need b's CPU and memory).
        let packing = [
            "",
            "fgd",
            "bestfit",
            "dotprod",
            "gpu-packing",
            "gpu-clustering",
            "random",
        ][seed as usize % 7];
        let cfg = if packing.is_empty() {
            config(policy)
        } else {
            config_with(
                policy,
                &format!("share_policy = \"{packing}\""),
                "cpus = 16\nmemory_gib = 64",
            )
        };
        let mut c = Core::new(cfg, 0).unwrap();
        let mut agents = vec![("a", Agent::default()), ("b", Agent::default())];
        let mut ids = Vec::new();
        let mut now = 0;
        for step in 0..300 {
            now += 100;
            match rnd(10) {
                0..=2 => {
                    let s = if rnd(2) == 0 {
                        let milli = [100, 250, 300, 500, 700, 999][rnd(6) as usize];
                        JobSpec {
                            cpu_milli: Some(rnd(3) * 1000),
                            memory_mib: Some(rnd(4) * 4096),
                            ..share(milli)
                        }
                    } else {
                        whole(1 + rnd(4) as u32)
                    };
                    ids.push(c.submit(s, now).unwrap());
                }
                3 if !ids.is_empty() => {
                    let id = ids[rnd(ids.len() as u64) as usize];
                    let _ = c.cancel(id, now);
                }
                4 if rnd(4) == 0 => {
                    let _ = c.drain(["a", "b"][rnd(2) as usize], now);
                    let _ = c.cordon("a", false);
                    let _ = c.cordon("b", false);
                }
                5 => {
                    // A process ends by itself.
                    let (_, a) = &mut agents[rnd(2) as usize];
                    if !a.running.is_empty() {
                        let (job, attempt, ..) =
                            a.running.remove(rnd(a.running.len() as u64) as usize);
                        a.exited.push((job, attempt, [0, 0, 1][rnd(3) as usize]));
                    }
                }
                _ => {}
            }
            c.check_time_limits(now);
            c.check_dependencies(now);
            c.schedule(now);
            for (name, a) in agents.iter_mut() {
                for st in a.stopping.iter_mut() {
                    st.2 = st.2.saturating_sub(1);
                }
                for (job, attempt, _) in a.stopping.iter().filter(|st| st.2 == 0) {
                    a.running.retain(|p| (p.0, p.1) != (*job, *attempt));
                    a.exited.push((*job, *attempt, -1));
                }
                a.stopping.retain(|st| st.2 > 0);
                let running: Vec<(u64, u32)> = a.running.iter().map(|p| (p.0, p.1)).collect();
                let h = hb(name, &running, &a.exited);
                let n = c.heartbeat(&h, now).unwrap();
                let reply = c.reply(n, &h);
                a.exited.clear();
                for s in reply.stop {
                    let runs = a.running.iter().any(|p| (p.0, p.1) == (s.job, s.attempt));
                    if runs
                        && !a
                            .stopping
                            .iter()
                            .any(|st| (st.0, st.1) == (s.job, s.attempt))
                    {
                        a.stopping.push((s.job, s.attempt, 1 + rnd(3)));
                    }
                }
                for l in reply.start {
                    a.running.push((l.job, l.attempt, l.gpus, l.gpu_milli));
                }
            }
            assert_safe(&agents, step);
            // The server's view agrees: no shared GPU over 1000.
            for n in c.nodes() {
                for s in &n.shares {
                    let sum: u32 = s.holders.iter().map(|h| h.milli).sum();
                    assert!(sum == s.used_milli && sum <= 1000, "{:?}", n.shares);
                }
            }
        }
        // Everything ends once the processes do: no share is left held.
        for _ in 0..50 {
            now += 100;
            for (_, a) in agents.iter_mut() {
                a.stopping.clear();
                for (job, attempt, ..) in a.running.drain(..) {
                    a.exited.push((job, attempt, 0));
                }
            }
            c.schedule(now);
            for (name, a) in agents.iter_mut() {
                let h = hb(name, &[], &a.exited);
                let n = c.heartbeat(&h, now).unwrap();
                a.exited.clear();
                for l in c.reply(n, &h).start {
                    a.running.push((l.job, l.attempt, l.gpus, l.gpu_milli));
                }
            }
        }
        let left: Vec<JobState> = ids.iter().map(|&id| c.job(id).unwrap().state).collect();
        assert!(
            left.iter().all(|s| s.terminal()),
            "seed {seed} ({packing}): {left:?}"
        );
        assert!(c.nodes().iter().all(|n| n.shares.is_empty()), "seed {seed}");
        assert_eq!(c.cluster().gpus_allocated, 0, "seed {seed}");
    }
}
