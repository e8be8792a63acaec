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

/// The same on etcd (`store = "etcd"`, a build with `--features etcd`): a real etcd on
/// loopback, and a second scheduler that rebuilds everything from it.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_state_survives_a_restart_on_etcd() {
    let Some(etcd) = apiary_store::testing::etcd::Etcd::start("service").await else {
        return;
    };
    let mut c = cfg();
    c.store = "etcd".into();
    c.etcd_endpoints = vec![etcd.url.clone()];
    c.etcd_prefix = "cluster-a".into();
    let store = service::open_store(&c, false).unwrap();
    assert!(store.describe().starts_with("etcd http://127.0.0.1:"));
    let clock: service::Clock = Arc::new(|| 1_000);
    let (h, task) = service::start(c.clone(), store, clock.clone())
        .await
        .unwrap();
    let a = h.submit(spec(2)).await.unwrap();
    let b = h.submit(spec(2)).await.unwrap();
    assert_eq!((a.state, b.state), (JobState::Running, JobState::Queued));
    h.cordon("a".into(), true).await.unwrap();
    task.abort();
    let _ = task.await;
    drop(h);
    // A new store and scheduler, as another replica would start: all of it is there.
    let (h, _task) = service::start(c.clone(), service::open_store(&c, false).unwrap(), clock)
        .await
        .unwrap();
    let (states, nodes) = h
        .read(|c| {
            let states: Vec<JobState> = c.jobs(None, None, 10).iter().map(|r| r.state).collect();
            (states, c.nodes())
        })
        .await
        .unwrap();
    assert_eq!(states, [JobState::Queued, JobState::Running]);
    assert!(nodes[0].cordoned);
    assert_eq!(h.submit(spec(1)).await.unwrap().id, 3, "ids continue");
    // Another cluster's prefix on the same etcd is a different, empty state.
    let mut other = c.clone();
    other.etcd_prefix = "cluster-b".into();
    let s = service::open_store(&other, false).unwrap();
    assert!(s.range("").await.unwrap().is_empty());
}

#[test]
fn a_store_the_build_or_config_cannot_serve_is_refused_naming_the_field() {
    let with = |extra: &str| {
        ServerConfig::parse(
            &format!("data_dir = \":memory:\"\n{extra}\n[[nodes]]\nname = \"a\"\ngpus = 4\n"),
            "server.toml",
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    assert!(
        with("store = \"zookeeper\"")
            .unwrap_err()
            .contains("unknown store 'zookeeper'")
    );
    let etcd = with("store = \"etcd\"\netcd_endpoints = [\"10.0.0.1:2379\"]");
    if cfg!(feature = "etcd") {
        assert!(
            etcd.unwrap_err()
                .contains("etcd_endpoints: '10.0.0.1:2379' is not an http://")
        );
        assert!(
            with("store = \"etcd\"")
                .unwrap_err()
                .contains("etcd_endpoints: list")
        );
    } else {
        assert!(etcd.unwrap_err().contains("built without etcd"));
    }
}
