//! The batching task over a store: what it acknowledged is there after a restart, VC
//! changes made through the API included.

use apiary_server::config::ServerConfig;
use apiary_server::service;
use apiary_server::types::*;
use apiary_store::Store;
use std::sync::Arc;

fn cfg() -> ServerConfig {
    ServerConfig::parse(
        r#"data_dir = ":memory:"
sharing = "quota"
log_format = "off"
[[vcs]]
name = "x"
quota_gpus = 2
[[nodes]]
name = "a"
gpus = 4
"#,
        "test",
    )
    .unwrap()
}

fn spec(gpus: u32) -> JobSpec {
    serde_json::from_value(serde_json::json!({"gpus": gpus, "vc": "x", "command": ["true"]}))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_state_survives_a_restart() {
    let store = Store::memory();
    let clock: service::Clock = Arc::new(|| 1_000);
    let (h, task) = service::start(cfg(), store.clone(), clock.clone())
        .await
        .unwrap();
    let a = h.submit(spec(2)).await.unwrap();
    let b = h.submit(spec(2)).await.unwrap();
    assert_eq!(a.state, JobState::Running);
    assert_eq!(b.state, JobState::Queued, "x's quota is 2 GPUs");
    // Raise the quota through the API: b starts.
    h.set_vc("x".into(), Some(4)).await.unwrap();
    let b = h
        .read(move |c| c.job(b.id).cloned())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.state, JobState::Running);
    h.cordon("a".into(), true).await.unwrap();
    task.abort();
    let _ = task.await;
    drop(h);
    // A new scheduler on the same store sees everything it acknowledged.
    let (h, _task) = service::start(cfg(), store, clock).await.unwrap();
    let (jobs, vcs, nodes) = h
        .read(|c| (c.jobs(None, None, 10).len(), c.vcs(), c.nodes()))
        .await
        .unwrap();
    assert_eq!(jobs, 2);
    assert_eq!(vcs[0]["quota_gpus"], 4);
    assert!(nodes[0].cordoned);
    let c = h.submit(spec(1)).await.unwrap();
    assert_eq!(c.id, 3, "ids continue");
    assert_eq!(
        h.set_vc("y".into(), None)
            .await
            .unwrap_err()
            .field
            .as_deref(),
        Some("quota_gpus")
    );
}
