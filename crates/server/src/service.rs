//! The scheduler task: it owns the [`Core`], takes requests in batches, applies them,
//! runs a scheduling pass, writes every changed record in one store transaction, and
//! only then answers the batch. A submission is therefore durable before its `201`, an
//! assignment is durable before an agent hears of it, and one fsync serves a whole
//! batch under load. If the store fails the process exits (fail-stop): the durable state
//! is the truth a restart rebuilds from.

use crate::config::ServerConfig;
use crate::core::{ApiError, Core, CoreError};
use crate::types::*;
use apiary_store::{Store, Txn};
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Milliseconds since the Unix epoch, or a test's clock.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Milliseconds since the Unix epoch now (0 on a clock set before it).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The wall clock.
pub fn wall_clock() -> Clock {
    Arc::new(unix_ms)
}

/// Why the service could not open its state or start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The scheduler could not be built from the config.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] apiary_store::StoreError),
    /// The carbon file cannot be used.
    #[error(transparent)]
    Carbon(#[from] crate::carbon::CarbonError),
    /// A file of the data directory.
    #[error("{what} {}: {source}", path.display())]
    File {
        /// What was being done ("creating", "writing", "reading").
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The state file is missing or empty where the data directory says it should be.
    #[error(
        "{} {why}{}: the scheduler's state was lost or moved. Restore it, or start \
         with an empty state (every job record forgotten, ids from 1) with \
         `apiary serve --init`",
        state.display(),
        marker.as_ref().map_or(String::new(), |m| format!(" but {} marks this directory as apiary's", m.display()))
    )]
    StateLost {
        /// The state file.
        state: std::path::PathBuf,
        /// Why it is lost.
        why: &'static str,
        /// The marker that says the directory is apiary's, if there is one.
        marker: Option<std::path::PathBuf>,
    },
    /// `--init` where a state is there.
    #[error("--init starts an empty state, but {} holds one: move it away first", .0.display())]
    InitOverState(std::path::PathBuf),
    /// A stored record that does not read.
    #[error("{store}: record {key}: {message}")]
    Record {
        /// The store.
        store: String,
        /// The record's key.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// A record could not be encoded (never expected: the types serialise).
    #[error("encoding a record: {0}")]
    Encode(#[from] serde_json::Error),
}

fn file_error(
    what: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> ServiceError {
    let path = path.to_path_buf();
    move |source| ServiceError::File { what, path, source }
}

type Reply<T> = oneshot::Sender<Result<T, ApiError>>;
type ReadFn = Box<dyn FnOnce(&Core) + Send>;

enum Request {
    Submit(Box<JobSpec>, Option<String>, Reply<JobRecord>),
    Cancel(u64, Reply<JobRecord>),
    Heartbeat(Heartbeat, Reply<HeartbeatReply>),
    Cordon(String, bool, Reply<()>),
    Drain(String, Reply<usize>),
    SetVc(String, Option<u64>, Reply<()>),
    Read(ReadFn),
}

/// Talks to the scheduler task; cheap to clone.
#[derive(Clone)]
pub struct Handle {
    tx: mpsc::Sender<Request>,
    archive: Arc<crate::archive::Archive>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handle")
    }
}

fn gone() -> ApiError {
    ApiError {
        status: 503,
        field: None,
        message: "the scheduler is shutting down".into(),
    }
}

impl Handle {
    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Request) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
    /// Accepts a job; returns its durable record.
    pub async fn submit(&self, spec: JobSpec) -> Result<JobRecord, ApiError> {
        self.submit_as(spec, None).await
    }
    /// Accepts a job from `user`; returns its durable record.
    pub async fn submit_as(
        &self,
        spec: JobSpec,
        user: Option<String>,
    ) -> Result<JobRecord, ApiError> {
        self.ask(|r| Request::Submit(Box::new(spec), user, r)).await
    }
    /// Cancels a job.
    pub async fn cancel(&self, id: u64) -> Result<JobRecord, ApiError> {
        self.ask(|r| Request::Cancel(id, r)).await
    }
    /// An agent's heartbeat.
    pub async fn heartbeat(&self, hb: Heartbeat) -> Result<HeartbeatReply, ApiError> {
        self.ask(|r| Request::Heartbeat(hb, r)).await
    }
    /// Cordons or uncordons a node.
    pub async fn cordon(&self, node: String, on: bool) -> Result<(), ApiError> {
        self.ask(|r| Request::Cordon(node, on, r)).await
    }
    /// Cordons a node and requeues its jobs; returns how many.
    pub async fn drain(&self, node: String) -> Result<usize, ApiError> {
        self.ask(|r| Request::Drain(node, r)).await
    }
    /// Creates a VC or changes its quota.
    pub async fn set_vc(&self, name: String, quota_gpus: Option<u64>) -> Result<(), ApiError> {
        self.ask(|r| Request::SetVc(name, quota_gpus, r)).await
    }
    /// The archive of jobs that left the hot state.
    pub fn archive(&self) -> Arc<crate::archive::Archive> {
        self.archive.clone()
    }
    /// Reads the state (after every earlier request was applied and persisted).
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Core) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Read(Box::new(move |c| {
                let _ = tx.send(f(c));
            })))
            .await
            .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())
    }
}

const JOB_PREFIX: &str = "jobs/";
const NEXT_ID: &str = "meta/next_id";
const CORDON_PREFIX: &str = "cordoned/";
const VC_PREFIX: &str = "vcs/";
const INSTANCE_PREFIX: &str = "instances/";

fn job_key(id: u64) -> String {
    format!("{JOB_PREFIX}{id:020}")
}

/// The file that marks a directory as apiary's data directory. A missing or empty state
/// file beside it means the state was lost, never that the cluster is new.
pub const MARKER: &str = "apiary-data.toml";
const STATE: &str = "state.redb";

/// Opens the store of `cfg`. A new data directory (no marker, no state) is created with
/// its marker. A directory whose marker is there but whose state is missing or empty is
/// refused unless `init` says to start fresh; a damaged state is refused, naming the
/// file. `init` never overwrites a state that is there.
pub fn open_store(cfg: &ServerConfig, init: bool) -> Result<Store, ServiceError> {
    #[cfg(feature = "etcd")]
    if cfg.store == "etcd" {
        // etcd keeps its own members' data: what is lost there is etcd's to say.
        return Ok(Store::etcd(cfg.etcd_endpoints.clone(), &cfg.etcd_prefix));
    }
    if cfg.in_memory() {
        return Ok(Store::memory());
    }
    let dir = &cfg.data_dir;
    std::fs::create_dir_all(dir).map_err(file_error("creating", dir))?;
    let marker = dir.join(MARKER);
    let state = dir.join(STATE);
    let marked = marker.exists();
    let size = match std::fs::metadata(&state) {
        Ok(m) => Some(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(file_error("reading", &state)(e)),
    };
    let lost = match size {
        None if marked => Some("is missing"),
        Some(0) => Some("is empty (0 bytes)"),
        _ => None,
    };
    match (lost, init) {
        (Some(why), false) => {
            return Err(ServiceError::StateLost {
                state,
                why,
                marker: marked.then_some(marker),
            });
        }
        (Some(_), true) if size == Some(0) => {
            std::fs::remove_file(&state).map_err(file_error("removing", &state))?;
        }
        (None, true) if size.is_some() => {
            return Err(ServiceError::InitOverState(state));
        }
        _ => {}
    }
    let store = Store::open(&state)?;
    if !marked {
        write_marker(&marker)?;
    }
    Ok(store)
}

fn write_marker(path: &std::path::Path) -> Result<(), ServiceError> {
    use std::io::Write as _;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let text = format!(
        "# apiary's data directory: state.redb beside this file is the scheduler's state.\n\
         # Remove neither; `apiary serve` refuses to start when the state is missing.\n\
         created_unix_s = {now}\n"
    );
    let mut f = std::fs::File::create(path).map_err(file_error("writing", path))?;
    f.write_all(text.as_bytes())
        .map_err(file_error("writing", path))?;
    f.sync_all().map_err(file_error("writing", path))?;
    if let Some(d) = path.parent() {
        std::fs::File::open(d)
            .and_then(|d| d.sync_all())
            .map_err(file_error("writing", path))?;
    }
    Ok(())
}

/// Rebuilds the scheduler from `store` and starts its task.
pub async fn start(
    cfg: ServerConfig,
    store: Store,
    clock: Clock,
) -> Result<(Handle, tokio::task::JoinHandle<()>), ServiceError> {
    let now = clock();
    let archive = Arc::new(
        crate::archive::Archive::open(cfg.archive_path().as_deref()).map_err(|e| {
            ServiceError::File {
                what: "creating",
                path: e.path,
                source: e.source,
            }
        })?,
    );
    let carbon = match &cfg.carbon_file {
        Some(f) => {
            let (watch, series) = crate::carbon::CarbonFile::open(f)?;
            Some((watch, series))
        }
        None => None,
    };
    let mut core = Core::new(cfg, now)?;
    let carbon = carbon.map(|(watch, series)| {
        core.set_carbon(series);
        watch
    });
    let mut records = Vec::new();
    for kv in store.range(JOB_PREFIX).await? {
        let r: JobRecord = serde_json::from_slice(&kv.value).map_err(|e| ServiceError::Record {
            store: store.describe(),
            key: kv.key.clone(),
            message: e.to_string(),
        })?;
        if r.schema_version > SCHEMA_VERSION {
            return Err(ServiceError::Record {
                store: store.describe(),
                key: kv.key,
                message: format!(
                    "has schema version {} (this server reads up to {SCHEMA_VERSION})",
                    r.schema_version
                ),
            });
        }
        records.push(r);
    }
    let next_id = match store.get(NEXT_ID).await? {
        Some(kv) => String::from_utf8_lossy(&kv.value).parse().unwrap_or(1),
        None => 1,
    };
    let cordoned: BTreeSet<String> = store
        .range(CORDON_PREFIX)
        .await?
        .into_iter()
        .filter(|kv| kv.value == b"true")
        .map(|kv| kv.key[CORDON_PREFIX.len()..].to_string())
        .collect();
    // VCs created or changed through the API override the config's.
    for kv in store.range(VC_PREFIX).await? {
        let v: crate::config::VcConfig =
            serde_json::from_slice(&kv.value).map_err(|e| ServiceError::Record {
                store: store.describe(),
                key: kv.key.clone(),
                message: e.to_string(),
            })?;
        core.set_vc(&v.name, v.quota_gpus)
            .map_err(|e| ServiceError::Record {
                store: store.describe(),
                key: kv.key.clone(),
                message: e.message,
            })?;
    }
    let _ = core.take_dirty();
    core.recover(records, next_id, &cordoned, now);
    for kv in store.range(INSTANCE_PREFIX).await? {
        core.recover_instance(
            &kv.key[INSTANCE_PREFIX.len()..],
            &String::from_utf8_lossy(&kv.value),
        );
    }
    core.expire(now);
    persist(&store, &archive, &mut core, now).await?;
    log(&format!(
        "recovered {} jobs from {}",
        core.jobs(None, None, usize::MAX).len(),
        store.describe()
    ));
    let (tx, rx) = mpsc::channel(4096);
    let task = tokio::spawn(run(core, store, archive.clone(), clock, rx, carbon));
    Ok((Handle { tx, archive }, task))
}

/// Writes what changed: records that left the hot state go to the archive (synced)
/// first and leave the store in the same transaction that writes the rest.
async fn persist(
    store: &Store,
    archive: &Arc<crate::archive::Archive>,
    core: &mut Core,
    now: u64,
) -> Result<Vec<JobRecord>, ServiceError> {
    let d = core.take_dirty();
    if d.jobs.is_empty()
        && d.next_id.is_none()
        && d.cordons.is_empty()
        && d.vcs.is_empty()
        && d.archived.is_empty()
        && d.instances.is_empty()
    {
        return Ok(Vec::new());
    }
    let mut t = Txn::new();
    if !d.archived.is_empty() {
        for r in &d.archived {
            t = t.delete(job_key(r.id));
        }
        let a = archive.clone();
        let records = d.archived;
        tokio::task::spawn_blocking(move || a.append(records, now))
            .await
            .map_err(|e| ServiceError::File {
                what: "archiving",
                path: "archive".into(),
                source: std::io::Error::other(e.to_string()),
            })?
            .map_err(|e| ServiceError::File {
                what: "archiving to",
                path: e.path,
                source: e.source,
            })?;
    }
    for r in &d.jobs {
        let v = serde_json::to_vec(r)?;
        t = t.put(job_key(r.id), v);
    }
    if let Some(n) = d.next_id {
        t = t.put(NEXT_ID, n.to_string());
    }
    for v in &d.vcs {
        let body = serde_json::to_vec(v)?;
        t = t.put(format!("{VC_PREFIX}{}", v.name), body);
    }
    for (node, on) in d.cordons {
        t = t.put(format!("{CORDON_PREFIX}{node}"), on.to_string());
    }
    for (node, instance) in d.instances {
        t = t.put(format!("{INSTANCE_PREFIX}{node}"), instance);
    }
    store.txn(t).await?;
    Ok(d.jobs)
}

/// Logs the transitions of `changed` made at or after `since` (unix ms).
/// Writes one line of the service's text log to stderr: a UTC timestamp, then `msg`.
pub fn log(msg: &str) {
    eprintln!(
        "{} apiary serve: {msg}",
        apiary_model::rfc3339_utc(unix_ms())
    );
}

fn log_events(format: &str, changed: &[JobRecord], nodes: &[crate::core::NodeEvent], since: u64) {
    if format == "off" || (changed.is_empty() && nodes.is_empty()) {
        return;
    }
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    for e in nodes {
        let _ = if format == "json" {
            writeln!(
                err,
                "{}",
                serde_json::json!({
                    "ts_ms": e.at_ms, "msg": "node", "node": e.node, "event": e.event,
                    "detail": e.detail,
                })
            )
        } else {
            writeln!(
                err,
                "{} apiary serve: node {} {}: {}",
                apiary_model::rfc3339_utc(e.at_ms),
                e.node,
                e.event,
                e.detail
            )
        };
    }
    for r in changed {
        for t in r.history.iter().filter(|t| t.at_ms >= since) {
            let _ = if format == "json" {
                writeln!(
                    err,
                    "{}",
                    serde_json::json!({
                        "ts_ms": t.at_ms, "msg": "job", "job": r.id, "vc": r.vc,
                        "event": t.event, "detail": t.detail, "attempt": r.attempt,
                    })
                )
            } else {
                writeln!(
                    err,
                    "{} apiary serve: job {} ({}) {}{}{}",
                    apiary_model::rfc3339_utc(t.at_ms),
                    r.id,
                    r.vc,
                    t.event,
                    if t.detail.is_empty() { "" } else { " " },
                    t.detail
                )
            };
        }
    }
}

enum Pending {
    Submit(Result<u64, ApiError>, Reply<JobRecord>),
    Cancel(u64, Result<(), ApiError>, Reply<JobRecord>),
    Heartbeat(Heartbeat, Result<u32, ApiError>, Reply<HeartbeatReply>),
    Cordon(Result<(), ApiError>, Reply<()>),
    Drain(Result<usize, ApiError>, Reply<usize>),
    SetVc(Result<(), ApiError>, Reply<()>),
    Read(ReadFn),
}

async fn run(
    mut core: Core,
    store: Store,
    archive: Arc<crate::archive::Archive>,
    clock: Clock,
    mut rx: mpsc::Receiver<Request>,
    mut carbon: Option<crate::carbon::CarbonFile>,
) {
    // The carbon file is looked at once a minute.
    let mut carbon_due = clock();
    let tick =
        std::time::Duration::from_secs_f64((core.config().heartbeat_interval_s / 2.0).max(0.05));
    let mut batch: Vec<Request> = Vec::new();
    loop {
        let due = core.wake().map(|w| w.saturating_sub(clock()));
        let wait = due.map_or(tick, |ms| tick.min(std::time::Duration::from_millis(ms)));
        tokio::select! {
            m = rx.recv() => match m {
                Some(m) => batch.push(m),
                None => return,
            },
            _ = tokio::time::sleep(wait) => {}
        }
        while batch.len() < 1024 {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        let now = clock();
        let mut pending = Vec::with_capacity(batch.len());
        for m in batch.drain(..) {
            pending.push(match m {
                Request::Submit(spec, user, r) => {
                    Pending::Submit(core.submit_as(*spec, user, now), r)
                }
                Request::Cancel(id, r) => Pending::Cancel(id, core.cancel(id, now), r),
                Request::Heartbeat(hb, r) => {
                    let n = core.heartbeat(&hb, now);
                    Pending::Heartbeat(hb, n, r)
                }
                Request::Cordon(node, on, r) => Pending::Cordon(core.cordon(&node, on), r),
                Request::Drain(node, r) => Pending::Drain(core.drain(&node, now), r),
                Request::SetVc(name, q, r) => Pending::SetVc(core.set_vc(&name, q), r),
                Request::Read(f) => Pending::Read(f),
            });
        }
        if let Some(watch) = &mut carbon
            && now >= carbon_due
        {
            carbon_due = now + 60_000;
            match watch.poll() {
                Some(Ok(series)) => {
                    log(&format!("carbon_file read again: {} hours", series.hours()));
                    core.set_carbon(series);
                }
                Some(Err(e)) => log(&format!("{e}; the last series stays")),
                None => {}
            }
        }
        core.check_nodes(now);
        core.check_time_limits(now);
        core.check_dependencies(now);
        let t0 = std::time::Instant::now();
        core.schedule(now);
        core.observe_pass(t0.elapsed().as_secs_f64());
        core.expire(now);
        match persist(&store, &archive, &mut core, now).await {
            Ok(changed) => {
                let nodes = core.take_node_events();
                log_events(&core.config().log_format, &changed, &nodes, now);
            }
            Err(e) => {
                log(&format!(
                    "cannot persist state ({e}); stopping so that a restart recovers the last durable state"
                ));
                std::process::exit(70);
            }
        }
        for p in pending {
            match p {
                Pending::Submit(res, r) => {
                    let _ = r.send(res.and_then(|id| core.job(id).cloned()));
                }
                Pending::Cancel(id, res, r) => {
                    let _ = r.send(res.and_then(|()| core.job(id).cloned()));
                }
                Pending::Heartbeat(hb, res, r) => {
                    let _ = r.send(res.map(|n| core.reply(n, &hb)));
                }
                Pending::Cordon(res, r) => {
                    let _ = r.send(res);
                }
                Pending::Drain(res, r) => {
                    let _ = r.send(res);
                }
                Pending::SetVc(res, r) => {
                    let _ = r.send(res);
                }
                Pending::Read(f) => f(&core),
            }
        }
    }
}
