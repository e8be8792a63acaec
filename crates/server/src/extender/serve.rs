//! Running the extender: its config file, the first sync that rebuilds state from the
//! API server before any call is served, the periodic sync after it, and the listener.

use super::Extender;
use super::http::{Shared, serve};
use super::kube::Kube;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `apiary serve --extender -c extender.toml`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtenderConfig {
    /// Address to listen on (HiveD's `webServerAddress`, `:9096`).
    #[serde(default = "listen")]
    pub listen: String,
    /// HiveD's config (`physicalCluster`, `virtualClusters`; upstream's file loads as
    /// is), relative to this file.
    pub hived_config: PathBuf,
    /// The API server: in a cluster, the `kubectl proxy` beside the extender.
    #[serde(default = "kube_api")]
    pub kube_api: String,
    /// A file holding a bearer token for the API server, if it wants one.
    #[serde(default)]
    pub kube_token_file: Option<PathBuf>,
    /// Seconds between lists of pods and nodes (deleted pods free their cells, node
    /// health follows `Ready`).
    #[serde(default = "resync")]
    pub resync_s: f64,
    /// Filters answered with a pod's node before the extender binds it itself
    /// (HiveD's `forcePodBindThreshold`).
    #[serde(default = "force")]
    pub force_bind_threshold: u32,
}

fn listen() -> String {
    "0.0.0.0:9096".into()
}
fn kube_api() -> String {
    "http://127.0.0.1:8001".into()
}
fn resync() -> f64 {
    2.0
}
fn force() -> u32 {
    3
}

/// Why the extender cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ExtenderServeError {
    /// The config file.
    #[error("{file}: {message}")]
    Config {
        /// The file.
        file: String,
        /// What is wrong, with the field.
        message: String,
    },
    /// The listener.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
}

impl ExtenderConfig {
    /// Reads `file`, with HiveD's config resolved beside it; refuses unknown keys and
    /// bad values naming the field.
    pub fn load(file: &Path) -> Result<(ExtenderConfig, apiary_hived::Config), ExtenderServeError> {
        let name = file.display().to_string();
        let bad = |message: String| ExtenderServeError::Config {
            file: name.clone(),
            message,
        };
        let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
        // toml's messages name the line, column and key at fault.
        let cfg: ExtenderConfig = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if !(cfg.resync_s.is_finite() && (0.05..=3600.0).contains(&cfg.resync_s)) {
            return Err(bad("resync_s: must be seconds, 0.05 to 3600".into()));
        }
        let dir = file.parent().unwrap_or(Path::new("."));
        let hived_file = dir.join(&cfg.hived_config);
        let text = std::fs::read_to_string(&hived_file)
            .map_err(|e| bad(format!("hived_config: {}: {e}", hived_file.display())))?;
        let hived = apiary_hived::Config::parse(&text)
            .map_err(|e| bad(format!("hived_config: {}: {e}", hived_file.display())))?;
        let mut cfg = cfg;
        if let Some(t) = &cfg.kube_token_file {
            cfg.kube_token_file = Some(dir.join(t));
        }
        Ok((cfg, hived))
    }
}

/// One sync: lists pods and nodes (outside the lock) and applies them.
pub fn sync_once(app: &Shared) -> Result<Vec<String>, super::kube::KubeError> {
    let generation = app.ext().begin_sync();
    let nodes = app.kube.nodes()?;
    let pods = app.kube.pods()?;
    Ok(app.ext().sync(generation, &pods, &nodes))
}

/// Runs the extender until `shutdown` resolves. State comes from the API server first
/// (retried until it answers), so no call is served before bound pods hold their cells.
pub async fn run(
    cfg: ExtenderConfig,
    hived: apiary_hived::Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    log: fn(&str),
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let token = match &cfg.kube_token_file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| format!("kube_token_file {}: {e}", f.display()))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let ext = Extender::new(&hived, cfg.force_bind_threshold)
        .map_err(|e| format!("hived_config: {e}"))?;
    let app = Arc::new(Shared {
        ext: Mutex::new(ext),
        kube: Kube::new(&cfg.kube_api, token),
    });
    let period = Duration::from_secs_f64(cfg.resync_s);
    loop {
        let a = app.clone();
        match tokio::task::spawn_blocking(move || sync_once(&a)).await? {
            Ok(problems) => {
                for p in problems {
                    log(&format!("recovery: {p}"));
                }
                break;
            }
            Err(e) => {
                log(&format!("waiting for the API server: {e}"));
                tokio::time::sleep(period).await;
            }
        }
    }
    let a = app.clone();
    let syncer = tokio::spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            let b = a.clone();
            match tokio::task::spawn_blocking(move || sync_once(&b)).await {
                Ok(Ok(problems)) => problems.iter().for_each(|p| log(&format!("sync: {p}"))),
                Ok(Err(e)) => log(&format!("sync: {e}")),
                Err(e) => log(&format!("sync: {e}")),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind(&cfg.listen)
        .await
        .map_err(|source| ExtenderServeError::Listen {
            addr: cfg.listen.clone(),
            source,
        })?;
    log(&format!(
        "extender listening on http://{}, API server {}",
        listener.local_addr()?,
        cfg.kube_api
    ));
    serve(listener, app, shutdown).await?;
    syncer.abort();
    Ok(())
}
