//! Bounded history in the core: finished jobs leave the hot state after their
//! retention, or early when their VC is over its record limits; a VC of only
//! unfinished jobs gets a 429; a dependency on a job that left is still answered.

mod common;

use apiary_server::core::{Core, JobQuery};
use apiary_server::types::*;

fn spec(gpus: u32, vc: &str) -> JobSpec {
    serde_json::from_value(serde_json::json!({"gpus": gpus, "command": ["true"], "vc": vc}))
        .unwrap()
}

fn hot(c: &Core, vc: &str) -> usize {
    let q = JobQuery {
        vc: Some(vc.into()),
        limit: 1000,
        ..Default::default()
    };
    c.page(&q, usize::MAX).0.len()
}

#[test]
fn a_vc_cycling_submit_and_cancel_stays_within_its_record_limit() {
    let cfg = common::two_nodes(
        "fifo",
        "max_jobs_per_vc = 20\nmax_records_per_vc = 30\nretain_finished_s = 3600",
    )
    .unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    let mut archived = Vec::new();
    let mut t = 0;
    for _cycle in 0..5 {
        let ids: Vec<u64> = (0..20)
            .map(|_| {
                t += 1;
                c.submit(spec(8, "a"), t).unwrap()
            })
            .collect();
        // A 21st unfinished job is past max_jobs_per_vc.
        assert_eq!(c.submit(spec(8, "a"), t).unwrap_err().status, 429);
        for id in ids {
            t += 1;
            c.cancel(id, t).unwrap();
        }
        archived.extend(c.take_dirty().archived);
        assert!(hot(&c, "a") <= 30, "{} hot", hot(&c, "a"));
    }
    // Every job is in the hot state or was handed over for the archive, once.
    assert_eq!(hot(&c, "a") + archived.len(), 100);
    let mut ids: Vec<u64> = archived.iter().map(|r| r.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), archived.len());
    assert_eq!(archived[0].id, 1, "oldest first");
    // A job that left still answers a dependency.
    let e = c
        .submit(
            serde_json::from_value(serde_json::json!(
                {"gpus": 1, "command": ["true"], "vc": "a", "after_ok": [1]}))
            .unwrap(),
            t,
        )
        .unwrap_err();
    assert!(e.message.contains("already cancelled"), "{e}");
    assert!(c.job(1).is_err(), "job 1 left the hot state");
}

#[test]
fn finished_jobs_leave_after_their_retention_and_unfinished_ones_never() {
    let cfg =
        common::two_nodes("fifo", "retain_finished_s = 10\nmax_records_per_vc = 10000").unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    let done = c.submit(spec(8, "a"), 0).unwrap();
    let waiting = c.submit(spec(8, "a"), 0).unwrap();
    c.cancel(done, 1000).unwrap();
    c.take_dirty();
    c.expire(10_999);
    assert!(c.take_dirty().archived.is_empty());
    c.expire(11_000);
    let d = c.take_dirty();
    assert_eq!(d.archived.iter().map(|r| r.id).collect::<Vec<_>>(), [done]);
    c.expire(1_000_000);
    assert!(c.take_dirty().archived.is_empty());
    assert_eq!(c.job(waiting).unwrap().state, JobState::Queued);
}

#[test]
fn a_tenant_depends_only_on_its_own_vcs_jobs() {
    let cfg = common::two_nodes("fifo", "").unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    let theirs = c.submit(spec(1, "b"), 0).unwrap();
    let e = c
        .submit(
            serde_json::from_value(serde_json::json!(
                {"gpus": 1, "command": ["true"], "vc": "a", "after_ok": [theirs]}))
            .unwrap(),
            1,
        )
        .unwrap_err();
    let absent = c
        .submit(
            serde_json::from_value(serde_json::json!(
                {"gpus": 1, "command": ["true"], "vc": "a", "after_ok": [999]}))
            .unwrap(),
            1,
        )
        .unwrap_err();
    // Another VC's job reads exactly as a job that does not exist.
    assert_eq!(e.status, 400);
    assert_eq!(
        e.message.replace(&theirs.to_string(), "N"),
        absent.message.replace("999", "N")
    );
}

#[test]
fn a_vc_at_its_byte_budget_makes_room_by_archiving_finished_jobs() {
    let cfg = common::two_nodes("fifo", "max_record_bytes_per_vc = 1048576").unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    let big = |t: u64| -> JobSpec {
        serde_json::from_value(serde_json::json!(
            {"gpus": 8, "command": ["true", "x".repeat(100 << 10)], "vc": "a", "name": format!("j{t}")}))
        .unwrap()
    };
    let mut ids = Vec::new();
    let mut t = 0;
    let e = loop {
        t += 1;
        match c.submit(big(t), t) {
            Ok(id) => ids.push(id),
            Err(e) => break e,
        }
    };
    assert_eq!(e.status, 429, "{e}");
    assert!(e.message.contains("max_record_bytes_per_vc"), "{e}");
    assert!((9..=10).contains(&ids.len()), "{} fit in 1 MiB", ids.len());
    for id in ids {
        t += 1;
        c.cancel(id, t).unwrap();
    }
    c.take_dirty();
    for _ in 0..5 {
        t += 1;
        c.submit(big(t), t).unwrap();
    }
    assert!(!c.take_dirty().archived.is_empty());
}

#[test]
fn a_finished_job_whose_processes_still_stop_holds_back_none_behind_it() {
    // 8-GPU jobs start on the two 4-GPU nodes; cancelled, their processes are asked to
    // stop, and no agent ever confirms it.
    let cfg = common::two_nodes("fifo", "max_record_bytes_per_vc = 1048576").unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    let big = || -> JobSpec {
        serde_json::from_value(serde_json::json!(
            {"gpus": 8, "command": ["true", "x".repeat(60 << 10)], "env": {"BIG": "y".repeat(60 << 10)}}))
        .unwrap()
    };
    let mut ids = Vec::new();
    for t in 0..8 {
        ids.push(c.submit(big(), t).unwrap());
        c.schedule(t);
        c.take_dirty();
    }
    assert_eq!(c.job(ids[0]).unwrap().state, JobState::Running);
    for (k, id) in ids.iter().enumerate() {
        c.cancel(*id, 100 + k as u64).unwrap();
        c.schedule(100);
        c.take_dirty();
    }
    // The first, still stopping, stays; the queued ones behind it make room.
    for t in 0..5 {
        c.submit(big(), 200 + t).unwrap();
    }
    let archived: Vec<u64> = c.take_dirty().archived.iter().map(|r| r.id).collect();
    assert!(
        !archived.contains(&ids[0]) && !archived.is_empty(),
        "{archived:?}"
    );
    assert!(c.job(ids[0]).is_ok());
}
