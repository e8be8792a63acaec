//! The live state machine without HTTP or a clock: fencing of preempted and cancelled
//! jobs, node loss, and recovery from the records it asks to persist.

mod common;

use apiary_server::config::ServerConfig;
use apiary_server::core::Core;
use apiary_server::types::*;
use common::hb;

fn config(policy: &str, params: &str) -> ServerConfig {
    config_with(&format!("params = {{ {params} }}"), policy)
}

fn spec(gpus: u32) -> JobSpec {
    serde_json::from_value(serde_json::json!({"gpus": gpus, "command": ["true"]})).unwrap()
}

fn state(c: &Core, id: u64) -> JobState {
    c.job(id).unwrap().state
}

#[test]
fn a_preempted_job_holds_its_gpus_until_its_process_ended() {
    // Tiresias with a 1 GPU-second first queue: a long 8-GPU job is demoted and then
    // preempted by a new one.
    let mut c = Core::new(config("tiresias", r#"thresholds = "1""#), 0).unwrap();
    let a = c.submit(spec(8), 0).unwrap();
    c.schedule(0);
    assert_eq!(state(&c, a), JobState::Running);
    for n in ["a", "b"] {
        c.heartbeat(&hb(n, &[(a, 1)], &[]), 100).unwrap();
    }
    c.schedule(1000); // demotion due at 125 ms x 8 GPUs = 1 GPU-s
    let b = c.submit(spec(8), 2000).unwrap();
    c.schedule(2000);
    assert_eq!(state(&c, a), JobState::Queued);
    assert_eq!(c.job(a).unwrap().history.last().unwrap().event, "preempted");
    // a's processes still run: b may not have the GPUs yet.
    assert_eq!(state(&c, b), JobState::Queued);
    let n = c.heartbeat(&hb("a", &[(a, 1)], &[]), 2100).unwrap();
    let reply = c.reply(n, &hb("a", &[(a, 1)], &[]));
    assert_eq!(reply.stop, vec![AttemptRef { job: a, attempt: 1 }]);
    assert!(reply.start.is_empty());
    c.schedule(2100);
    assert_eq!(state(&c, b), JobState::Queued, "one node still stopping");
    c.heartbeat(&hb("a", &[], &[(a, 1, -1)]), 2200).unwrap();
    c.heartbeat(&hb("b", &[], &[(a, 1, -1)]), 2200).unwrap();
    c.schedule(2200);
    assert_eq!(state(&c, b), JobState::Running);
    assert_eq!(
        state(&c, a),
        JobState::Queued,
        "a waits behind b, never twice"
    );
}

#[test]
fn a_lost_node_requeues_after_the_grace_period_and_stops_stale_processes() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    let j = c.submit(spec(4), 0).unwrap();
    c.schedule(0);
    let node = c.job(j).unwrap().parts[0].node.clone();
    let other = if node == "a" { "b" } else { "a" };
    c.heartbeat(&hb(&node, &[(j, 1)], &[]), 500).unwrap();
    c.heartbeat(&hb(other, &[], &[]), 500).unwrap();
    // Silent past the timeout: down, but the job keeps its GPUs during the grace.
    c.heartbeat(&hb(other, &[], &[]), 6000).unwrap();
    c.check_nodes(6000);
    assert_eq!(
        c.nodes().iter().find(|n| n.name == node).unwrap().health,
        NodeHealth::Down
    );
    assert_eq!(state(&c, j), JobState::Running);
    c.heartbeat(&hb(other, &[], &[]), 7600).unwrap();
    c.check_nodes(7600);
    assert_eq!(state(&c, j), JobState::Queued);
    assert_eq!(c.counters().failures.get("node_lost"), Some(&1));
    c.schedule(7600);
    let r = c.job(j).unwrap();
    assert_eq!(
        (r.state, r.attempt, r.parts[0].node.as_str()),
        (JobState::Running, 2, other)
    );
    // The lost node's agent comes back still running attempt 1: it is told to stop.
    let back = hb(&node, &[(j, 1)], &[]);
    let n = c.heartbeat(&back, 8000).unwrap();
    assert_eq!(
        c.reply(n, &back).stop,
        vec![AttemptRef { job: j, attempt: 1 }]
    );
}

#[test]
fn cancel_holds_a_running_jobs_gpus_until_it_stopped() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    let j = c.submit(spec(4), 0).unwrap();
    let k = c.submit(spec(8), 0).unwrap();
    c.schedule(0);
    c.cancel(j, 10).unwrap();
    assert_eq!(state(&c, j), JobState::Cancelled);
    c.schedule(10);
    assert_eq!(state(&c, k), JobState::Queued, "j's GPUs are still held");
    let node = c.job(j).unwrap().parts[0].node.clone();
    c.heartbeat(&hb(&node, &[], &[(j, 1, -1)]), 20).unwrap();
    c.schedule(20);
    assert_eq!(state(&c, k), JobState::Running);
    assert_eq!(c.cancel(j, 30).unwrap_err().status, 409);
    assert_eq!(c.cancel(99, 30).unwrap_err().status, 404);
}

#[test]
fn recovery_from_the_persisted_records_gives_the_same_state() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    let ids: Vec<u64> = [4, 4, 2, 8]
        .iter()
        .map(|&g| c.submit(spec(g), 0).unwrap())
        .collect();
    c.schedule(0);
    c.cancel(ids[0], 5).unwrap();
    let d = c.take_dirty();
    let next = d.next_id.unwrap();
    let mut r = Core::new(config("fifo", ""), 100).unwrap();
    r.recover(d.jobs, next, &Default::default(), 100);
    for &id in &ids {
        assert_eq!(
            r.job(id).unwrap().state,
            c.job(id).unwrap().state,
            "job {id}"
        );
        assert_eq!(
            r.job(id).unwrap().parts,
            c.job(id).unwrap().parts,
            "job {id}"
        );
    }
    let free = |c: &Core| c.nodes().iter().map(|n| n.free_gpus).collect::<Vec<_>>();
    assert_eq!(
        free(&r),
        free(&c),
        "running jobs and the cancelled job's held GPUs"
    );
    assert_eq!(r.submit(spec(1), 200).unwrap(), next, "ids continue");
}

#[test]
fn metrics_expose_queues_decisions_and_a_pass_histogram() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    let mut s = spec(8);
    s.vc = Some("team-a".into());
    for _ in 0..3 {
        c.submit(s.clone(), 0).unwrap();
    }
    c.schedule(0);
    c.observe_pass(0.00002);
    c.observe_pass(5.0);
    let text = apiary_server::http::metrics_text(&c);
    for want in [
        "# TYPE apiary_queue_length gauge",
        "apiary_queue_length{vc=\"team-a\"} 2",
        "apiary_running_jobs 1",
        "apiary_gpus_total 8",
        "apiary_gpus_allocated 8",
        "apiary_decisions_total{kind=\"start\"} 1",
        "apiary_submissions_total 3",
        "apiary_scheduling_pass_seconds_bucket{le=\"0.00001\"} 0",
        "apiary_scheduling_pass_seconds_bucket{le=\"0.00003\"} 1",
        "apiary_scheduling_pass_seconds_bucket{le=\"1\"} 1",
        "apiary_scheduling_pass_seconds_bucket{le=\"+Inf\"} 2",
        "apiary_scheduling_pass_seconds_count 2",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
}

fn config_with(extra: &str, policy: &str) -> ServerConfig {
    common::two_nodes(policy, extra).unwrap()
}

fn vc_spec(gpus: u32, vc: &str) -> JobSpec {
    let mut s = spec(gpus);
    s.vc = Some(vc.into());
    s
}

#[test]
fn quotas_cap_each_vc_even_with_gpus_free() {
    let cfg = config_with(
        "sharing = \"quota\"\n[[vcs]]\nname = \"x\"\nquota_gpus = 4\n[[vcs]]\nname = \"y\"\nquota_gpus = 4\n",
        "fifo",
    );
    let mut c = Core::new(cfg, 0).unwrap();
    assert_eq!(
        c.submit(vc_spec(8, "x"), 0).unwrap_err().field.as_deref(),
        Some("gpus")
    );
    assert_eq!(
        c.submit(vc_spec(1, "z"), 0).unwrap_err().field.as_deref(),
        Some("vc")
    );
    let x1 = c.submit(vc_spec(4, "x"), 0).unwrap();
    let x2 = c.submit(vc_spec(2, "x"), 0).unwrap();
    c.schedule(0);
    assert_eq!(
        (state(&c, x1), state(&c, x2)),
        (JobState::Running, JobState::Queued)
    );
    let y = c.submit(vc_spec(4, "y"), 1).unwrap();
    c.schedule(1);
    assert_eq!(state(&c, y), JobState::Running, "y's quota is its own");
    let node = c.job(x1).unwrap().parts[0].node.clone();
    c.heartbeat(&hb(&node, &[], &[(x1, 1, 0)]), 2).unwrap();
    c.schedule(2);
    assert_eq!(state(&c, x2), JobState::Running, "x's quota freed");
    let v = c.vcs();
    assert_eq!(v[0]["gpus_running"], 2);
}

#[test]
fn hived_keeps_each_vc_in_its_cells_and_recovers_them() {
    let cfg = || {
        config_with(
            "sharing = \"hived\"\n[[vcs]]\nname = \"x\"\nnodes = 1\n[[vcs]]\nname = \"y\"\nnodes = 1\n",
            "fifo",
        )
    };
    let mut c = Core::new(cfg(), 0).unwrap();
    let x1 = c.submit(vc_spec(2, "x"), 0).unwrap();
    let x2 = c.submit(vc_spec(2, "x"), 0).unwrap();
    let x3 = c.submit(vc_spec(2, "x"), 0).unwrap();
    c.schedule(0);
    assert_eq!(
        (state(&c, x1), state(&c, x2), state(&c, x3)),
        (JobState::Running, JobState::Running, JobState::Queued),
        "x owns one 4-GPU node cell although 8 GPUs are free"
    );
    assert_eq!(
        c.reason(c.job(x3).unwrap()),
        Some("QuotaExceeded"),
        "the tenancy says x's cells are taken"
    );
    let nx = c.job(x1).unwrap().parts[0].node.clone();
    assert_eq!(c.job(x2).unwrap().parts[0].node, nx, "packed in one node");
    let y = c.submit(vc_spec(4, "y"), 1).unwrap();
    c.schedule(1);
    assert_eq!(state(&c, y), JobState::Running);
    // Restart: HiveD takes the running jobs back into the VCs' cells.
    let d = c.take_dirty();
    let mut r = Core::new(cfg(), 10).unwrap();
    r.recover(d.jobs, d.next_id.unwrap(), &Default::default(), 10);
    let x4 = r.submit(vc_spec(1, "x"), 11).unwrap();
    r.schedule(11);
    assert_eq!(
        state(&r, x4),
        JobState::Queued,
        "x's cell is still full after recovery"
    );
    r.heartbeat(&hb(&nx, &[(x2, 1)], &[(x1, 1, 0)]), 12)
        .unwrap();
    r.schedule(12);
    assert_eq!(
        state(&r, x3),
        JobState::Running,
        "x's freed GPUs go to x's queue"
    );
}

#[test]
fn jobs_naming_a_gpu_type_go_to_nodes_of_that_type() {
    let cfg = ServerConfig::parse(
        r#"data_dir = ":memory:"
[[nodes]]
name = "k"
gpus = 4
gpu_type = "K80"
[[nodes]]
name = "v0"
gpus = 4
gpu_type = "V100"
[[nodes]]
name = "v1"
gpus = 4
gpu_type = "V100"
"#,
        "test",
    )
    .unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    let typed = |g: u32, t: &str| {
        let mut s = spec(g);
        s.gpu_type = Some(t.into());
        s
    };
    assert_eq!(
        c.submit(typed(1, "A100"), 0).unwrap_err().field.as_deref(),
        Some("gpu_type")
    );
    assert_eq!(
        c.submit(typed(5, "K80"), 0).unwrap_err().field.as_deref(),
        Some("gpus")
    );
    let a = c.submit(typed(6, "V100"), 0).unwrap();
    let b = c.submit(typed(2, "K80"), 0).unwrap();
    let d = c.submit(typed(4, "V100"), 0).unwrap();
    c.schedule(0);
    let nodes = |id| {
        c.job(id)
            .unwrap()
            .parts
            .iter()
            .map(|p| p.node.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(nodes(a), ["v0", "v1"]);
    assert_eq!(nodes(b), ["k"]);
    assert_eq!(state(&c, d), JobState::Queued, "only 2 V100s left, on v1");
}

#[test]
fn a_down_node_is_bad_hardware_for_hived() {
    let cfg = config_with(
        "sharing = \"hived\"\n[[vcs]]\nname = \"x\"\nnodes = 1\n[[vcs]]\nname = \"y\"\nnodes = 1\n",
        "fifo",
    );
    let mut c = Core::new(cfg, 0).unwrap();
    c.heartbeat(&hb("a", &[], &[]), 0).unwrap();
    c.check_nodes(6000); // b silent past the timeout: down, bad in HiveD
    let x = c.submit(vc_spec(4, "x"), 6000).unwrap();
    let y = c.submit(vc_spec(4, "y"), 6000).unwrap();
    c.heartbeat(&hb("a", &[], &[]), 6000).unwrap();
    c.schedule(6000);
    // One VC gets node a; the other's cell is doomed to the bad node and waits.
    let running = [x, y]
        .iter()
        .filter(|&&j| state(&c, j) == JobState::Running)
        .count();
    assert_eq!(running, 1);
    c.heartbeat(&hb("b", &[], &[]), 6100).unwrap();
    c.schedule(6100);
    assert_eq!(
        (state(&c, x), state(&c, y)),
        (JobState::Running, JobState::Running)
    );
}

#[test]
fn a_part_its_restarted_agent_does_not_report_is_unknown_until_timeout_and_grace() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    let j = c.submit(spec(4), 0).unwrap();
    c.schedule(0);
    let node = c.job(j).unwrap().parts[0].node.clone();
    c.heartbeat(&hb(&node, &[(j, 1)], &[]), 100).unwrap();
    // The agent restarted without its records: it reports nothing of the attempt. The
    // process may still run, so the job neither reruns at once nor frees its GPUs.
    c.heartbeat(&hb(&node, &[], &[]), 1000).unwrap();
    c.schedule(1000);
    assert_eq!(state(&c, j), JobState::Running);
    c.heartbeat(&hb(&node, &[], &[]), 1000 + 6900).unwrap();
    assert_eq!(
        state(&c, j),
        JobState::Running,
        "within timeout + grace (7 s)"
    );
    c.heartbeat(&hb(&node, &[], &[]), 1000 + 7100).unwrap();
    assert_eq!(
        state(&c, j),
        JobState::Queued,
        "given up after timeout + grace"
    );
    let r = c.job(j).unwrap();
    assert!(
        r.history.iter().any(|t| t.event == "requeued"),
        "{:?}",
        r.history
    );
}

#[test]
fn a_part_reported_again_is_no_longer_missing() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    let j = c.submit(spec(4), 0).unwrap();
    c.schedule(0);
    let node = c.job(j).unwrap().parts[0].node.clone();
    c.heartbeat(&hb(&node, &[(j, 1)], &[]), 100).unwrap();
    c.heartbeat(&hb(&node, &[], &[]), 1000).unwrap();
    c.heartbeat(&hb(&node, &[(j, 1)], &[]), 2000).unwrap();
    // Missing again later: the clock starts anew.
    c.heartbeat(&hb(&node, &[], &[]), 7500).unwrap();
    c.heartbeat(&hb(&node, &[], &[]), 9000).unwrap();
    assert_eq!(state(&c, j), JobState::Running);
}

#[test]
fn an_agent_that_stops_reports_its_jobs_lost_and_its_node_takes_no_new_ones() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    let j = c.submit(spec(4), 0).unwrap();
    c.schedule(0);
    let node = c.job(j).unwrap().parts[0].node.clone();
    let other = if node == "a" { "b" } else { "a" };
    c.heartbeat(&hb(&node, &[(j, 1)], &[]), 100).unwrap();
    c.heartbeat(&hb(other, &[], &[]), 100).unwrap();
    let mut bye = hb(&node, &[], &[(j, 1, -1)]);
    bye.exited[0].lost = true;
    bye.shutting_down = true;
    c.heartbeat(&bye, 200).unwrap();
    assert_eq!(state(&c, j), JobState::Queued);
    c.schedule(200);
    let r = c.job(j).unwrap();
    assert_eq!((r.attempt, r.parts[0].node.as_str()), (2, other));
    let down = c.nodes().into_iter().find(|n| n.name == node).unwrap();
    assert_eq!((down.health, down.free_gpus), (NodeHealth::Down, 0));
    // Back with a heartbeat that is not a goodbye: up again.
    c.heartbeat(&hb(&node, &[], &[]), 300).unwrap();
    c.schedule(300);
    let up = c.nodes().into_iter().find(|n| n.name == node).unwrap();
    assert_eq!((up.health, up.free_gpus), (NodeHealth::Up, 4));
}

#[test]
fn oversized_fields_get_a_413_naming_them_and_each_vc_has_a_job_limit() {
    use apiary_server::types::limits;
    let mut c = Core::new(config_with("max_jobs_per_vc = 2", "fifo"), 0).unwrap();
    let big = |n: usize| "x".repeat(n);
    let cases: Vec<(JobSpec, u16, &str)> = vec![
        (
            JobSpec {
                name: Some(big(limits::NAME_BYTES + 1)),
                ..spec(1)
            },
            413,
            "name",
        ),
        (
            JobSpec {
                command: vec![big(limits::COMMAND_BYTES + 1)],
                ..spec(1)
            },
            413,
            "command",
        ),
        (
            JobSpec {
                command: vec!["true".into(); limits::COMMAND_ARGS + 1],
                ..spec(1)
            },
            413,
            "command",
        ),
        (
            JobSpec {
                env: [("K".to_string(), big(limits::ENV_BYTES + 1))].into(),
                ..spec(1)
            },
            413,
            "env",
        ),
        (
            JobSpec {
                env: [("A=B".to_string(), "1".to_string())].into(),
                ..spec(1)
            },
            400,
            "env.A=B",
        ),
        (
            JobSpec {
                command: vec!["tr\0ue".into()],
                ..spec(1)
            },
            400,
            "command[0]",
        ),
        (
            JobSpec {
                workdir: Some(big(limits::WORKDIR_BYTES + 1)),
                ..spec(1)
            },
            413,
            "workdir",
        ),
        (
            JobSpec {
                vc: Some(big(limits::LABEL_BYTES + 1)),
                ..spec(1)
            },
            413,
            "vc",
        ),
        (
            JobSpec {
                deadline_unix_s: Some(u64::MAX),
                ..spec(1)
            },
            400,
            "deadline_unix_s",
        ),
    ];
    for (s, status, field) in cases {
        let e = c.submit(s, 0).unwrap_err();
        assert_eq!((e.status, e.field.as_deref()), (status, Some(field)), "{e}");
    }
    // Two unfinished jobs of VC x: the third is refused; another VC is not affected;
    // once one ends, x may submit again.
    let first = c.submit(vc_spec(4, "x"), 0).unwrap();
    c.submit(vc_spec(4, "x"), 0).unwrap();
    let e = c.submit(vc_spec(1, "x"), 0).unwrap_err();
    assert_eq!((e.status, e.field.as_deref()), (429, Some("vc")), "{e}");
    c.submit(vc_spec(1, "y"), 0).unwrap();
    c.cancel(first, 10).unwrap();
    c.submit(vc_spec(1, "x"), 20).unwrap();
}

#[test]
fn a_queued_job_says_why_it_waits() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    for n in ["a", "b"] {
        c.heartbeat(&hb(n, &[], &[]), 10).unwrap();
    }
    let a = c.submit(spec(4), 20).unwrap();
    c.schedule(20);
    let b = c.submit(spec(8), 30).unwrap();
    let small = c.submit(spec(1), 30).unwrap();
    c.schedule(30);
    let why = |c: &Core, id: u64| c.reason(c.job(id).unwrap());
    assert_eq!(state(&c, a), JobState::Running);
    assert_eq!(why(&c, a), None);
    // 4 GPUs free: not 8, so b waits for resources; FIFO keeps the 1-GPU job behind it.
    assert_eq!(why(&c, b), Some("Resources"));
    assert_eq!(why(&c, small), Some("Priority"));
    // The free GPUs are on a node now cordoned.
    let free_node = if c.job(a).unwrap().parts[0].node == "a" {
        "b"
    } else {
        "a"
    };
    c.cordon(free_node, true).unwrap();
    assert_eq!(why(&c, small), Some("Cordoned"));
    assert_eq!(why(&c, b), Some("Resources"));
    // The API shows it; the records it persists never carry it.
    assert_eq!(
        c.shown(c.job(small).unwrap()).reason.as_deref(),
        Some("Cordoned")
    );
    assert!(c.take_dirty().jobs.iter().all(|r| r.reason.is_none()));

    let quota = config_with(
        "sharing = \"quota\"\n[[vcs]]\nname = \"x\"\nquota_gpus = 4\n",
        "fifo",
    );
    let mut q = Core::new(quota, 0).unwrap();
    for n in ["a", "b"] {
        q.heartbeat(&hb(n, &[], &[]), 10).unwrap();
    }
    let x1 = q.submit(vc_spec(4, "x"), 20).unwrap();
    let x2 = q.submit(vc_spec(2, "x"), 20).unwrap();
    q.schedule(20);
    assert_eq!(state(&q, x1), JobState::Running);
    assert_eq!(why(&q, x2), Some("QuotaExceeded"));
}

#[test]
fn afterok_holds_a_job_until_its_dependencies_succeed() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    for n in ["a", "b"] {
        c.heartbeat(&hb(n, &[], &[]), 10).unwrap();
    }
    let first = c.submit(spec(1), 20).unwrap();
    let after = c
        .submit(
            JobSpec {
                after_ok: vec![first],
                ..spec(1)
            },
            20,
        )
        .unwrap();
    c.schedule(20);
    c.check_dependencies(20);
    c.schedule(20);
    assert_eq!(state(&c, first), JobState::Running);
    // GPUs are free, but it waits for `first`.
    assert_eq!(state(&c, after), JobState::Queued);
    assert_eq!(c.reason(c.job(after).unwrap()), Some("Dependency"));
    let node = c.job(first).unwrap().parts[0].node.clone();
    c.heartbeat(&hb(&node, &[], &[(first, 1, 0)]), 100).unwrap();
    assert_eq!(state(&c, first), JobState::Succeeded);
    assert!(c.check_dependencies(100));
    c.schedule(100);
    assert_eq!(state(&c, after), JobState::Running);

    // A dependency that fails cancels the job that waits for it, saying why.
    let doomed = c.submit(spec(1), 200).unwrap();
    let waiter = c
        .submit(
            JobSpec {
                after_ok: vec![doomed],
                ..spec(1)
            },
            200,
        )
        .unwrap();
    c.cancel(doomed, 210).unwrap();
    assert!(c.check_dependencies(210));
    assert_eq!(state(&c, waiter), JobState::Cancelled);
    let last = c.job(waiter).unwrap().history.last().unwrap().clone();
    assert!(
        last.detail.contains(&format!("afterok:{doomed}")),
        "{last:?}"
    );
    // One that already failed, or does not exist, is refused at submission.
    let e = c
        .submit(
            JobSpec {
                after_ok: vec![doomed],
                ..spec(1)
            },
            220,
        )
        .unwrap_err();
    assert_eq!(e.status, 409);
    let e = c
        .submit(
            JobSpec {
                after_ok: vec![999],
                ..spec(1)
            },
            220,
        )
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("after_ok"));
}

#[test]
fn a_node_takes_one_agent_instance_and_a_replaced_ones_parts_stay_held_past_its_lease() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    let j = c.submit(spec(4), 0).unwrap();
    c.schedule(0);
    let node = c.job(j).unwrap().parts[0].node.clone();
    let other = if node == "a" { "b" } else { "a" };
    c.heartbeat(&hb(&node, &[(j, 1)], &[]), 100).unwrap();
    c.heartbeat(&hb(other, &[], &[]), 100).unwrap();
    // A second instance claiming the node is refused while the first is heard.
    let mut dup = hb(&node, &[], &[]);
    dup.instance = "dup".into();
    let e = c.heartbeat(&dup, 200).unwrap_err();
    assert_eq!(e.status, 409);
    assert!(e.message.contains("served by agent instance test"), "{e}");
    assert_eq!(state(&c, j), JobState::Running);
    // With --replace it takes the node over; the first is fenced.
    dup.replace = true;
    let n = c.heartbeat(&dup, 300).unwrap();
    assert!(c.reply(n, &dup).start.is_empty(), "never relaunched here");
    let e = c.heartbeat(&hb(&node, &[(j, 1)], &[]), 400).unwrap_err();
    assert_eq!(e.status, 409);
    assert!(e.message.contains("fenced"), "{e}");
    // The job is requeued, but runs again only once the old instance's lease has
    // surely run out (node timeout 5 s + grace 2 s), and its GPUs stay held till then.
    let k = c.submit(spec(8), 400).unwrap();
    for t in [400, 3000, 7000] {
        c.heartbeat(&dup, t).unwrap();
        c.heartbeat(&hb(other, &[], &[]), t).unwrap();
        c.check_nodes(t);
        c.schedule(t);
        assert_eq!(state(&c, j), JobState::Queued, "held at {t} ms");
        assert_eq!(state(&c, k), JobState::Queued, "held at {t} ms");
    }
    c.heartbeat(&dup, 7400).unwrap();
    c.check_nodes(7400);
    c.schedule(7400);
    assert_eq!(c.job(j).unwrap().attempt, 2);
    assert_eq!(state(&c, j), JobState::Running);
    // A later instance that succeeds `dup` on its state directory takes over as such.
    let mut next = hb(&node, &[], &[]);
    next.instance = "next".into();
    next.succeeds = Some("dup".into());
    c.heartbeat(&next, 7500).unwrap();
}

#[test]
fn a_nodes_agent_binding_survives_a_server_restart() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    c.recover(Vec::new(), 1, &Default::default(), 10_000);
    c.recover_instance("a", "test");
    // The recovered instance gets the full node timeout (5 s) from the restart.
    let mut dup = hb("a", &[], &[]);
    dup.instance = "dup".into();
    assert_eq!(c.heartbeat(&dup, 12_000).unwrap_err().status, 409);
    c.heartbeat(&hb("a", &[], &[]), 12_500).unwrap();
    assert_eq!(c.heartbeat(&dup, 13_000).unwrap_err().status, 409);
    // Silent past the timeout, it may be taken over.
    c.heartbeat(&dup, 18_000).unwrap();
    assert!(
        c.take_dirty()
            .instances
            .contains(&("a".into(), "dup".into()))
    );
}

/// Live, carbon-pause reads the series the server holds (its `carbon_file`, read again
/// as it changes): above the threshold a job waits, and when the new series is clean
/// it starts.
#[test]
fn carbon_pause_waits_for_a_clean_series_live() {
    use apiary_model::energy::Intensity;
    let hour = 3_600_000;
    let mut c = Core::new(config("carbon-pause", r#"threshold = "200""#), 0).unwrap();
    c.set_carbon(Intensity::new("dirty", vec![400.0], 0).anchored(0));
    let a = c.submit(spec(4), 10).unwrap();
    c.schedule(10);
    assert_eq!(state(&c, a), JobState::Queued);
    // It asked to look again on the hour.
    assert_eq!(c.wake(), Some(hour));
    c.set_carbon(Intensity::new("clean", vec![100.0], 0).anchored(0));
    c.schedule(hour);
    assert_eq!(state(&c, a), JobState::Running);
}

/// The live service counts its GPUs' energy and carbon between passes, at the
/// intensity it holds, and `/metrics` shows them.
#[test]
fn energy_and_carbon_are_counted_live() {
    use apiary_model::energy::{Intensity, gpu_power};
    let hour = 3_600_000;
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    c.set_carbon(Intensity::new("file", vec![100.0, 300.0], 0).anchored(0));
    let p = gpu_power(&c.world().cluster.nodes[0].gpu_type);
    let a = c.submit(spec(4), 0).unwrap();
    c.schedule(0);
    assert_eq!(state(&c, a), JobState::Running);
    // Two hours: four GPUs busy and four idle, at 100 and then 300 g/kWh.
    c.schedule(2 * hour);
    let e = c.energy();
    assert!(
        (e.busy_kwh - 4.0 * p.busy_w * 2.0 / 1000.0).abs() < 1e-9,
        "{e:?}"
    );
    assert!(
        (e.idle_kwh - 4.0 * p.idle_w * 2.0 / 1000.0).abs() < 1e-9,
        "{e:?}"
    );
    let kg = 4.0 * p.busy_w / 1000.0 * 0.4;
    assert!((e.busy_carbon_kg - kg).abs() < 1e-9, "{e:?}");
    let text = apiary_server::http::metrics_text(&c);
    assert!(
        text.contains("# TYPE apiary_carbon_kg_total counter"),
        "{text}"
    );
    assert!(text.contains("apiary_carbon_intensity 300"), "{text}");
    assert!(
        text.contains(&format!(
            "apiary_carbon_kg_total{{gpus=\"busy\"}} {}",
            e.busy_carbon_kg
        )),
        "{text}"
    );
}

#[test]
fn a_declared_failure_exit_reruns_from_its_checkpoint_and_is_counted() {
    let mut c = Core::new(config("fifo", ""), 0).unwrap();
    let mut s = spec(4);
    s.checkpoint_dir = Some("/ckpt/run-7".into());
    s.restart.failure_exit_codes = vec![134];
    let j = c.submit(s, 0).unwrap();
    c.schedule(0);
    let node = c.job(j).unwrap().parts[0].node.clone();
    let h = hb(&node, &[], &[]);
    let n = c.heartbeat(&h, 10).unwrap();
    let first = c.reply(n, &h).start;
    assert_eq!(first[0].env["APIARY_RESTART_COUNT"], "0");
    assert_eq!(first[0].env["APIARY_CHECKPOINT_DIR"], "/ckpt/run-7");
    c.heartbeat(&hb(&node, &[(j, 1)], &[]), 20).unwrap();
    // 134 is a failure it declared: requeued (on_failure is off), not failed.
    c.heartbeat(&hb(&node, &[], &[(j, 1, 134)]), 30).unwrap();
    let r = c.job(j).unwrap();
    assert_eq!(r.state, JobState::Queued);
    assert!(
        r.history.last().unwrap().detail.contains("failure code"),
        "{:?}",
        r.history.last()
    );
    c.schedule(40);
    let node = c.job(j).unwrap().parts[0].node.clone();
    let h = hb(&node, &[], &[]);
    let n = c.heartbeat(&h, 50).unwrap();
    let second = c.reply(n, &h).start;
    assert_eq!(second[0].env["APIARY_RESTART_COUNT"], "1");
    assert_eq!(second[0].env["APIARY_ATTEMPT"], "2");
    // Another code is the job's own failure: it fails for good.
    c.heartbeat(&hb(&node, &[(j, 2)], &[]), 60).unwrap();
    c.heartbeat(&hb(&node, &[], &[(j, 2, 1)]), 70).unwrap();
    assert_eq!(c.job(j).unwrap().state, JobState::Failed);
    let text = apiary_server::http::metrics_text(&c);
    for want in [
        "apiary_failures_total{cause=\"exit_code\"} 1",
        "apiary_failures_total{cause=\"node_lost\"} 0",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
}
