//! Several servers on one etcd prefix, one leading (feature `etcd`). Each server
//! campaigns for the prefix's leader key (an etcd lease, `leader_lease_s`); the one
//! that holds it rebuilds the state from etcd and schedules, exactly as a restarted
//! server does, with its store fenced by the revision it took the key at, so that once
//! deposed it cannot write. The others answer every request with a 503 naming the
//! leader, watch its key, and campaign again as soon as it is gone (and at least every
//! [`RETRY`]), so that one takes over as the leader's lease runs out.
//! A leader renews its lease every third of it; one that finds it gone stops the
//! process (exit 75), since its writes would be refused anyway.

use crate::config::ServerConfig;
use apiary_store::{EtcdStore, Leadership, Store, StoreError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Time between a follower's campaigns (Kubernetes' leader election retries at 2 s).
pub const RETRY: Duration = Duration::from_secs(2);

/// On an etcd store: waits until this server leads (answering as a follower
/// meanwhile), fences the store with its leadership and keeps renewing it. Other
/// stores have one server: nothing to do.
pub async fn lead(store: &Store, cfg: &ServerConfig) -> Result<(), StoreError> {
    if let Store::Etcd(e) = store {
        let l = follow_until_leading(e, cfg, crate::service::log).await?;
        e.fence(Some(l.revision));
        keep_leading(e.clone(), l, cfg.leader_lease_s, crate::service::log);
    }
    Ok(())
}

/// How others reach this server: `advertise_url`, else its listen address.
pub fn me(cfg: &ServerConfig) -> String {
    cfg.advertise_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", cfg.listen))
}

/// Campaigns until this server leads, answering requests on `listen` meanwhile with a
/// 503 naming the leader. Returns the leadership, the listen socket closed again.
pub async fn follow_until_leading(
    store: &EtcdStore,
    cfg: &ServerConfig,
    log: impl Fn(&str),
) -> Result<Leadership, StoreError> {
    let me = me(cfg);
    let lease = cfg.leader_lease_s.ceil().max(2.0) as i64;
    let leader: Arc<Mutex<String>> = Arc::new(Mutex::new("unknown".into()));
    let mut follower: Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )> = None;
    loop {
        // etcd unreachable for now (members down, no quorum): say so, and try again.
        let campaign = match store.campaign(&me, lease).await {
            Ok(c) => c,
            Err(e) => {
                log(&format!("campaigning: {e}; trying again"));
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        if let Some(l) = campaign {
            if let Some((stop, task)) = follower.take() {
                let _ = stop.send(());
                let _ = task.await;
            }
            log(&format!("leading, at revision {}", l.revision));
            return Ok(l);
        }
        let now = match store.leader().await {
            Ok(l) => l.map_or_else(|| "none (an election is under way)".to_string(), |l| l.0),
            Err(_) => "unknown (etcd unreachable)".to_string(),
        };
        let changed = leader.lock().map(|mut g| {
            let changed = *g != now;
            *g = now.clone();
            changed
        });
        if changed.unwrap_or(false) {
            log(&format!("following {now}"));
        }
        if follower.is_none() {
            follower = Some(answer_as_follower(&cfg.listen, leader.clone()).await?);
        }
        // Campaign again as soon as the leader is gone (its key deleted, or its lease
        // run out), and at least every RETRY.
        if store.leader_gone(RETRY).await.is_err() {
            tokio::time::sleep(RETRY).await;
        }
    }
}

/// Serves 503 naming the leader on `listen` until told to stop.
async fn answer_as_follower(
    listen: &str,
    leader: Arc<Mutex<String>>,
) -> Result<
    (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ),
    StoreError,
> {
    let listener =
        tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| StoreError::Backend {
                location: format!("listen {listen}"),
                message: e.to_string(),
            })?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = axum::Router::new().fallback(move || {
        let leader = leader.lock().map(|g| g.clone()).unwrap_or_default();
        async move {
            (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(serde_json::json!({
                    "error": format!("this server is not the leader; the leader is {leader}"),
                    "leader": leader,
                })),
            )
        }
    });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
    });
    Ok((tx, task))
}

/// Renews the lease every third of it; stops the process once it is gone.
pub fn keep_leading(store: EtcdStore, mut l: Leadership, lease_s: f64, log: fn(&str)) {
    tokio::spawn(async move {
        let every = Duration::from_secs_f64((lease_s / 3.0).max(0.5));
        loop {
            tokio::time::sleep(every).await;
            match store.renew(&mut l).await {
                Ok(true) => {}
                Ok(false) => {
                    log("lost the leadership (its lease ran out): stopping");
                    std::process::exit(75);
                }
                Err(e) => log(&format!("renewing the leadership: {e}")),
            }
        }
    });
}
