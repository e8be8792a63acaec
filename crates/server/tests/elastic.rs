//! Elastic jobs on the live state machine: ElasticFlow sizes them, a resize stops the
//! job (its GPUs held until its processes ended) and restarts it at the new size, and
//! admission control's refusals end jobs saying why. Adaptive jobs report their goodput
//! model (hints) only through their own attempts' agents.

mod common;

use apiary_server::core::Core;
use apiary_server::types::*;
use common::hb;

fn elastic(gpus: u32, range: (u32, u32), estimate_s: f64, deadline_s: Option<u64>) -> JobSpec {
    serde_json::from_value(serde_json::json!({
        "gpus": gpus, "command": ["train"], "estimated_duration_s": estimate_s,
        "deadline_unix_s": deadline_s,
        "elastic": {"min_gpus": range.0, "max_gpus": range.1},
    }))
    .unwrap()
}

fn gpus_of(c: &Core, id: u64) -> usize {
    c.job(id).unwrap().parts.iter().map(|p| p.gpus.len()).sum()
}

fn launch_env(c: &mut Core, id: u64, now: u64) -> std::collections::BTreeMap<String, String> {
    let node = c.job(id).unwrap().parts[0].node.clone();
    let h = hb(&node, &[], &[]);
    let n = c.heartbeat(&h, now).unwrap();
    let start = c.reply(n, &h).start;
    start.into_iter().find(|l| l.job == id).unwrap().env
}

#[test]
fn elasticflow_shrinks_a_job_by_stopping_and_restarting_it() {
    // Two nodes of 4 GPUs; ElasticFlow deciding every second. Each job's work is
    // 800 s on 8 GPUs = 6,400 GPU-seconds at linear throughput.
    let mut c = Core::new(
        common::two_nodes("elasticflow", "params = { slot = \"1\" }").unwrap(),
        0,
    )
    .unwrap();
    let a = c.submit(elastic(8, (1, 8), 800.0, None), 0).unwrap();
    c.schedule(0);
    // Alone, best-effort a gets every GPU: each one added still speeds it up.
    assert_eq!(gpus_of(&c, a), 8);
    assert_eq!(launch_env(&mut c, a, 100)["APIARY_NUM_GPUS"], "8");
    for n in ["a", "b"] {
        c.heartbeat(&hb(n, &[(a, 1)], &[]), 200).unwrap();
    }
    // b must finish 6,400 GPU-seconds within 2,000 s: 3.2 GPUs, so 4 (a power of two),
    // and a keeps the other 4. a is stopped to be resized; b waits for its GPUs.
    let b = c
        .submit(elastic(8, (1, 8), 800.0, Some(2000)), 10_000)
        .unwrap();
    c.schedule(10_000);
    assert_eq!(c.job(a).unwrap().state, JobState::Queued);
    assert_eq!(
        c.job(b).unwrap().state,
        JobState::Queued,
        "a's processes still run"
    );
    let h = hb("a", &[(a, 1)], &[]);
    let n = c.heartbeat(&h, 10_100).unwrap();
    assert_eq!(c.reply(n, &h).stop, vec![AttemptRef { job: a, attempt: 1 }]);
    c.schedule(10_100);
    assert_eq!(
        c.job(b).unwrap().state,
        JobState::Queued,
        "node b still stopping"
    );
    // A deadline no allocation can meet (6,400 GPU-seconds in 80 s on 8 GPUs):
    // admission control declines it, and the job ends saying so.
    let d = c
        .submit(elastic(8, (1, 8), 800.0, Some(100)), 20_000)
        .unwrap();
    c.schedule(20_000);
    let rd = c.job(d).unwrap();
    assert_eq!(rd.state, JobState::Failed);
    assert_eq!(rd.history.last().unwrap().event, "declined");
    // a's processes end (after their checkpoint): a restarts on 4 GPUs, b runs on 4.
    for n in ["a", "b"] {
        c.heartbeat(&hb(n, &[], &[(a, 1, -1)]), 30_000).unwrap();
    }
    c.schedule(30_000);
    let ra = c.job(a).unwrap();
    assert_eq!((ra.state, ra.attempt), (JobState::Running, 2));
    assert!(
        ra.history
            .iter()
            .any(|t| t.event == "resized" && t.detail == "8 -> 4 GPUs"),
        "{:?}",
        ra.history
    );
    assert_eq!((gpus_of(&c, a), gpus_of(&c, b)), (4, 4));
    assert_eq!(c.job(b).unwrap().state, JobState::Running);
    let env = launch_env(&mut c, a, 30_100);
    assert_eq!(
        (
            env["APIARY_NUM_GPUS"].as_str(),
            env["APIARY_RESTART_COUNT"].as_str()
        ),
        ("4", "1")
    );
    let (na, nb) = (
        &c.job(a).unwrap().parts[0].node,
        &c.job(b).unwrap().parts[0].node,
    );
    assert_ne!(na, nb, "buddy placement: one node each");
}

#[test]
fn elastic_submissions_are_checked_and_run_as_asked_by_other_policies() {
    let mut c = Core::new(common::two_nodes("elasticflow", "").unwrap(), 0).unwrap();
    let field = |c: &mut Core, s: JobSpec| c.submit(s, 0).unwrap_err();
    let e = field(&mut c, elastic(4, (3, 4), 10.0, None));
    assert_eq!(
        (e.status, e.field.as_deref()),
        (400, Some("elastic.min_gpus"))
    );
    let e = field(&mut c, elastic(8, (1, 4), 10.0, None));
    assert_eq!((e.status, e.field.as_deref()), (400, Some("gpus")));
    let mut s = elastic(4, (2, 4), 10.0, None);
    s.elastic.as_mut().unwrap().throughput = vec![(4, 3.0)];
    let e = field(&mut c, s);
    assert_eq!(e.field.as_deref(), Some("elastic.throughput"));
    assert!(e.message.contains("[2, 4]"), "{}", e.message);
    // A rigid job runs at its size beside elastic ones, if buddy placement can hold it.
    let mut rigid = elastic(3, (1, 4), 10.0, None);
    rigid.elastic = None;
    let e = c.submit(rigid.clone(), 0).unwrap_err();
    assert!(e.message.contains("power-of-two"), "{}", e.message);
    rigid.gpus = 2;
    let r = c.submit(rigid, 0).unwrap();
    c.schedule(0);
    assert_eq!(gpus_of(&c, r), 2);

    // A policy that does not resize runs an elastic job at its `gpus`.
    let mut f = Core::new(common::two_nodes("fifo", "").unwrap(), 0).unwrap();
    let j = f.submit(elastic(2, (1, 8), 10.0, None), 0).unwrap();
    f.schedule(0);
    assert_eq!(gpus_of(&f, j), 2);
}

#[test]
fn elasticflow_decides_on_live_passes_that_miss_whole_seconds() {
    // The service passes every 50 ms at whatever millisecond the clock says; the
    // planner counts whole seconds and asks to be woken at the next one.
    for start in [1_795_752_668_936u64, 1_795_752_668_000, 1_795_752_668_500] {
        let cfg = common::two_nodes("elasticflow", "params = { slot = \"1\" }").unwrap();
        let mut c = Core::new(cfg, start - 30).unwrap();
        c.schedule(start - 20);
        let a = c.submit(elastic(8, (1, 8), 800.0, None), start).unwrap();
        let mut t = start + 1;
        while t < start + 5000 && c.job(a).unwrap().state == JobState::Queued {
            c.schedule(t);
            t += 50;
        }
        let started = c.job(a).unwrap().history.last().unwrap().at_ms;
        assert_eq!(c.job(a).unwrap().state, JobState::Running);
        assert!(
            started < start.next_multiple_of(1000) + 50,
            "{start}: {started}"
        );
    }
}

#[test]
fn elasticflow_plans_on_the_nodes_in_service() {
    // Node b is cordoned: an elastic job that would take both nodes' 8 GPUs gets node
    // a's 4 instead of waiting for b.
    let cfg = common::two_nodes("elasticflow", "params = { slot = \"1\" }").unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    c.cordon("b", true).unwrap();
    let a = c.submit(elastic(8, (1, 8), 800.0, None), 0).unwrap();
    c.schedule(0);
    let r = c.job(a).unwrap();
    assert_eq!(r.state, JobState::Running);
    assert_eq!((gpus_of(&c, a), r.parts[0].node.as_str()), (4, "a"));
}

#[test]
fn an_adaptive_jobs_hints_count_only_from_its_current_attempt_on_its_own_nodes() {
    let mut c = Core::new(
        common::two_nodes("pollux", "params = { interval = \"1\" }").unwrap(),
        0,
    )
    .unwrap();
    let job: JobSpec = serde_json::from_value(serde_json::json!({
        "gpus": 1, "command": ["train"],
        "adaptive": {"init_batch_size": 128, "max_batch_size": 4096, "local_bsz_bounds": [32, 256]},
    }))
    .unwrap();
    let a = c.submit(job, 0).unwrap();
    // A job without --adaptive has no goodput model: Pollux refuses it, saying how.
    let rigid: JobSpec =
        serde_json::from_value(serde_json::json!({"gpus": 1, "command": ["train"]})).unwrap();
    let e = c.submit(rigid, 0).unwrap_err();
    assert!(
        e.message.contains("apiary submit --adaptive"),
        "{}",
        e.message
    );
    c.schedule(1000);
    let rec = c.job(a).unwrap();
    assert_eq!(rec.state, JobState::Running);
    assert_eq!(gpus_of(&c, a), 1, "no goodput model yet: one replica");
    let node = rec.parts[0].node.clone();
    let other = if node == "a" { "b" } else { "a" };
    let text = r#"{"maxProfiledReplicas": 1, "gradParams": {"norm": 0.01, "var": 1.0},
        "perfParams": {"alpha_c": 0.1, "beta_c": 0.01, "alpha_n": 0.01, "beta_n": 0.001,
                       "alpha_r": 0.01, "beta_r": 0.001, "gamma": 1.5}}"#;
    let with_hints = |n: &str, attempt: u32| {
        let mut h = hb(n, &[(a, 1)], &[]);
        h.hints = vec![HintsReport {
            job: a,
            attempt,
            text: text.into(),
        }];
        h
    };
    // Another node's agent, or an attempt that is not the current one: dropped.
    c.heartbeat(&with_hints(other, 1), 1100).unwrap();
    c.heartbeat(&with_hints(&node, 7), 1200).unwrap();
    assert_eq!(c.job(a).unwrap().hints, None);
    c.heartbeat(&with_hints(&node, 1), 1300).unwrap();
    let hints = c.job(a).unwrap().hints.clone().unwrap();
    assert_eq!(hints.max_profiled_replicas, Some(1));
    assert_eq!(hints.perf_params.unwrap().gamma, 1.5);
    // Bad hints are refused in the job's history, and the good ones stay.
    let mut h = hb(&node, &[(a, 1)], &[]);
    h.hints = vec![HintsReport {
        job: a,
        attempt: 1,
        text: r#"{"localBszBounds": [8, 16]}"#.into(),
    }];
    c.heartbeat(&h, 1400).unwrap();
    let rec = c.job(a).unwrap();
    let last = rec.history.last().unwrap();
    assert_eq!(last.event, "hints rejected");
    assert_eq!(
        last.detail,
        format!("attempt 1 on {node}: localBszBounds (8, 16) is not the submission's (32, 256)")
    );
    assert_eq!(rec.hints.as_ref().unwrap().max_profiled_replicas, Some(1));
}
