//! The live scheduler's state machine: jobs, nodes and the policy, with no I/O and no
//! clock (every call takes the time), so it is tested like the simulator.
//!
//! The policy is the simulator's, behind the same [`Ctx`], on a [`World`] set up for
//! real processes: (a) a job whose previous attempt is still stopping is blocked from
//! starting, so one job never runs twice at once; (b) a preempted job's GPUs stay held
//! until its agents confirm the processes ended, so no GPU is double-booked
//! ([`World::fence_preemptions`]); (c) a job's GPU type limits its placement. GPUs of
//! down or cordoned nodes are held too. Tenancy (quotas, HiveD cells, private
//! partitions) is the simulator's [`apiary_policy::vc::VcSharing`], given its VC table
//! from the config.
//!
//! The caller persists what [`Core::take_dirty`] returns before it answers anyone.

use crate::config::ServerConfig;
use crate::types::*;
use apiary_model::{Cluster, ClusterSpec, Job, NodeGroup, Placement, SwitchSpec, Time};
use apiary_policy::{Action, Capability, Ctx, JobIdx, Params, Policy, Status, TenantShare, World};
use std::collections::{BTreeMap, BTreeSet};

/// An API error: an HTTP status, the offending field if any, and a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// JSON path of the offending field, e.g. `gpus`.
    pub field: Option<String>,
    /// What was wrong.
    pub message: String,
}

impl ApiError {
    /// 400 for a field.
    pub fn bad(field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            field: Some(field.into()),
            message: message.into(),
        }
    }
    /// 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 404,
            field: None,
            message: message.into(),
        }
    }
    /// 401.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 401,
            field: None,
            message: message.into(),
        }
    }
    /// 403.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 403,
            field: None,
            message: message.into(),
        }
    }
    /// 413 for a field over its size limit.
    pub fn too_large(field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 413,
            field: Some(field.into()),
            message: message.into(),
        }
    }
    /// 429 for a field whose limit is reached.
    pub fn too_many(field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 429,
            field: Some(field.into()),
            message: message.into(),
        }
    }
    /// 422: the policy refuses the job.
    pub fn refused(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 422,
            field: None,
            message: message.into(),
        }
    }
    /// 409.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 409,
            field: None,
            message: message.into(),
        }
    }
}

/// A job's run time when the user gives no estimate (SJF puts such jobs last).
const UNKNOWN_DURATION_MS: Time = 10 * 365 * 24 * 3600 * 1000;
/// Largest GPU count a job may ask for.
pub const MAX_JOB_GPUS: u32 = 4096;

#[derive(Debug, Clone)]
struct NodeRt {
    name: String,
    gpus: u32,
    gpu_type: String,
    health: NodeHealth,
    cordoned: bool,
    last_heartbeat: Option<u64>,
    /// GPUs held because the node is down or cordoned.
    blocked: u64,
}

/// What the caller must persist.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Changed job records.
    pub jobs: Vec<JobRecord>,
    /// The next job id, when it changed.
    pub next_id: Option<u64>,
    /// Cordon flags that changed.
    pub cordons: Vec<(String, bool)>,
    /// VCs created or changed through the API.
    pub vcs: Vec<crate::config::VcConfig>,
}

/// Upper bounds of the scheduling-pass latency histogram, seconds.
pub const PASS_BUCKETS: [f64; 10] = [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 1.0];

/// Counters for `/metrics`.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// Decisions and outcomes by kind: start, preempt, requeue, succeed, fail, cancel.
    pub decisions: BTreeMap<&'static str, u64>,
    /// Jobs accepted.
    pub submissions: u64,
    /// Scheduling passes per latency bucket (the last counts the rest).
    pub pass_buckets: [u64; PASS_BUCKETS.len() + 1],
    /// Sum of pass latencies, seconds.
    pub pass_sum: f64,
}

impl Counters {
    fn count(&mut self, kind: &'static str) {
        *self.decisions.entry(kind).or_insert(0) += 1;
    }
}

/// The scheduler.
pub struct Core {
    cfg: ServerConfig,
    params: Params,
    world: World,
    policy: Box<dyn Policy>,
    actions: Vec<Action>,
    jobs: Vec<JobRecord>,
    by_id: BTreeMap<u64, JobIdx>,
    next_id: u64,
    nodes: Vec<NodeRt>,
    node_ix: BTreeMap<String, u32>,
    /// GPUs held for processes asked to stop: (job id, attempt, node) → mask.
    stopping: BTreeMap<(u64, u32, u32), u64>,
    dirty: BTreeSet<JobIdx>,
    dirty_cordons: Vec<(String, bool)>,
    dirty_vcs: Vec<crate::config::VcConfig>,
    next_id_dirty: bool,
    wake: Option<u64>,
    started: u64,
    counters: Counters,
    /// (unix ms, GPUs allocated), at most one sample per [`UTIL_SAMPLE_MS`].
    util: std::collections::VecDeque<(u64, u64)>,
    /// Unfinished (queued or running) jobs per VC, against `max_jobs_per_vc`.
    active: BTreeMap<String, u64>,
    /// Started parts whose agent reported neither running nor exited, since when (unix
    /// ms): unknown, not lost, until the node timeout and grace period have passed.
    missing: BTreeMap<(u64, u32, u32), u64>,
}

/// Spacing of the utilisation samples the dashboard plots.
pub const UTIL_SAMPLE_MS: u64 = 10_000;
/// Samples kept (one day).
pub const UTIL_SAMPLES: usize = 8640;

/// What occupies one GPU, for the dashboard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuUse {
    /// Free.
    Free,
    /// A running job: id and VC.
    Job(u64, String),
    /// Held for a process still stopping.
    Stopping(u64),
    /// The node is down or cordoned.
    Blocked,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("policy", &self.cfg.policy)
            .field("jobs", &self.jobs.len())
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

/// The VC table the config declares, for a policy with the `tenants` capability.
fn live_table(cfg: &ServerConfig) -> Vec<TenantShare> {
    let node_gpus = cfg.nodes.first().map_or(0, |n| n.gpus) as u64;
    cfg.vcs
        .iter()
        .map(|v| TenantShare {
            name: v.name.clone(),
            nodes: v.nodes.unwrap_or(0),
            gpus: v
                .quota_gpus
                .unwrap_or(v.nodes.unwrap_or(0) as u64 * node_gpus),
        })
        .collect()
}

/// Refuses a submission whose fields are over the [`limits`]: 413 naming the field, or 400
/// for a value no process could be started with.
fn check_sizes(s: &JobSpec) -> Result<(), ApiError> {
    let over = |field: &str, len: usize, max: usize, what: &str| {
        if len > max {
            Err(ApiError::too_large(
                field,
                format!("{len} {what}, at most {max}"),
            ))
        } else {
            Ok(())
        }
    };
    if let Some(n) = &s.name {
        over("name", n.len(), limits::NAME_BYTES, "bytes")?;
    }
    for (f, v) in [("vc", &s.vc), ("gpu_type", &s.gpu_type)] {
        if let Some(v) = v {
            over(f, v.len(), limits::LABEL_BYTES, "bytes")?;
        }
    }
    over(
        "command",
        s.command.len(),
        limits::COMMAND_ARGS,
        "arguments",
    )?;
    let bytes: usize = s.command.iter().map(String::len).sum();
    over("command", bytes, limits::COMMAND_BYTES, "bytes")?;
    if let Some(i) = s.command.iter().position(|a| a.contains('\0')) {
        return Err(ApiError::bad(
            &format!("command[{i}]"),
            "contains a NUL byte",
        ));
    }
    over("env", s.env.len(), limits::ENV_VARS, "variables")?;
    let bytes: usize = s.env.iter().map(|(k, v)| k.len() + v.len()).sum();
    over("env", bytes, limits::ENV_BYTES, "bytes")?;
    if let Some(k) = s
        .env
        .iter()
        .find(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
        .map(|(k, _)| k)
    {
        return Err(ApiError::bad(
            &format!("env.{k}"),
            "a variable's name is non-empty without '=' or NUL, its value without NUL",
        ));
    }
    if let Some(w) = &s.workdir {
        over("workdir", w.len(), limits::WORKDIR_BYTES, "bytes")?;
        if w.contains('\0') {
            return Err(ApiError::bad("workdir", "contains a NUL byte"));
        }
    }
    Ok(())
}

fn mask_of(gpus: &[u32]) -> u64 {
    gpus.iter().fold(0u64, |m, &g| m | (1u64 << g))
}

fn gpus_of(mask: u64) -> Vec<u32> {
    (0..64).filter(|b| mask & (1 << b) != 0).collect()
}

fn note(r: &mut JobRecord, at_ms: u64, event: &str, detail: String) {
    r.history.push(Transition {
        at_ms,
        event: event.into(),
        detail,
    });
}

impl Core {
    /// A scheduler over the config's nodes, all of them of unknown health until their
    /// agents report (they count as up for `node_timeout_s` after `now`).
    pub fn new(cfg: ServerConfig, now: u64) -> Result<Core, String> {
        let spec = ClusterSpec {
            name: "live".into(),
            switches: vec![SwitchSpec {
                name: Some("live".into()),
                count: 1,
                uplink_gbps: None,
                nodes: cfg
                    .nodes
                    .iter()
                    .map(|n| NodeGroup {
                        count: 1,
                        gpus: n.gpus,
                        gpu_type: n.gpu_type.clone(),
                        cpus: 0,
                        memory_gb: 0,
                        nic_gbps: None,
                        intra_gbps: None,
                    })
                    .collect(),
            }],
        };
        let mut cluster = spec.build().map_err(|e| e.to_string())?;
        for (n, c) in cluster.nodes.iter_mut().zip(&cfg.nodes) {
            n.name = c.name.clone();
        }
        Core::on_cluster(cfg, cluster, now)
    }

    /// A scheduler over `cluster`, whose nodes are the config's in order (a replay keeps
    /// the simulated cluster's switches and links, so placements match the simulator's).
    pub fn on_cluster(cfg: ServerConfig, cluster: Cluster, now: u64) -> Result<Core, String> {
        if cluster.nodes.len() != cfg.nodes.len()
            || cluster
                .nodes
                .iter()
                .zip(&cfg.nodes)
                .any(|(n, c)| n.name != c.name || n.gpus != c.gpus)
        {
            return Err("the cluster's nodes are not the config's".into());
        }
        let (name, params) = cfg.policy_params();
        let mut policy =
            apiary_policy::registry::build(&name, &params).map_err(|e| e.to_string())?;
        if let Some((c, why)) = policy.spec().capabilities.live_blocker() {
            return Err(format!("policy {name} needs the `{c}` capability: {why}"));
        }
        if let Some(t) = policy.tenancy() {
            t.set_table(live_table(&cfg));
        }
        policy.attach(&cluster).map_err(|e| format!("policy {e}"))?;
        let nodes = cfg
            .nodes
            .iter()
            .map(|n| NodeRt {
                name: n.name.clone(),
                gpus: n.gpus,
                gpu_type: n.gpu_type.clone(),
                health: NodeHealth::Unknown,
                cordoned: false,
                last_heartbeat: None,
                blocked: 0,
            })
            .collect();
        let node_ix = cfg
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i as u32))
            .collect();
        let mut world = World::new(cluster, Vec::new());
        world.now = now;
        world.fence_preemptions = true;
        world.honour_gpu_types = true;
        let core = Core {
            cfg,
            params,
            world,
            policy,
            actions: Vec::new(),
            jobs: Vec::new(),
            by_id: BTreeMap::new(),
            next_id: 1,
            nodes,
            node_ix,
            stopping: BTreeMap::new(),
            dirty: BTreeSet::new(),
            dirty_cordons: Vec::new(),
            dirty_vcs: Vec::new(),
            next_id_dirty: false,
            wake: None,
            started: now,
            counters: Counters::default(),
            util: std::collections::VecDeque::new(),
            active: BTreeMap::new(),
            missing: BTreeMap::new(),
        };
        Ok(core)
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// Agents that stop processes at once (a replay on simulated time): a preempted
    /// job's GPUs are free to the same pass, as in the simulator, instead of held until
    /// its agents confirm.
    pub fn stop_instantly(&mut self) {
        self.world.fence_preemptions = false;
    }

    /// The world the policy sees, read-only.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// What the last scheduling pass did.
    pub fn last_actions(&self) -> &[Action] {
        &self.actions
    }

    /// The policy's name (with `sharing`, the VC-sharing policy hosting `policy`).
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    fn advance(&mut self, now: u64) {
        self.world.now = self.world.now.max(now);
    }

    fn job_model(&self, id: u64, spec: &JobSpec, submitted: u64) -> Job {
        let mut j = Job::new(
            id.to_string(),
            submitted,
            spec.gpus,
            spec.estimated_duration_s
                .map_or(UNKNOWN_DURATION_MS, |s| (s * 1000.0).round() as Time),
        );
        j.priority = spec.priority;
        j.vc = spec.vc.clone();
        j.gpu_type = spec.gpu_type.clone();
        j.deadline = spec.deadline_unix_s.map(|d| d.saturating_mul(1000));
        if self.policy.spec().has(Capability::Profiles) {
            // As the simulator does for trace jobs without one: a stage profile drawn
            // from Muri's table by job id.
            apiary_model::profiles::assign(std::slice::from_mut(&mut j), 0);
        }
        j
    }

    fn add_to_world(&mut self, rec: JobRecord) -> JobIdx {
        let job = self.job_model(rec.id, &rec.spec, rec.submitted_ms);
        let j = self.world.push_job(job);
        self.by_id.insert(rec.id, j);
        self.jobs.push(rec);
        j
    }

    /// Queues a job and tells the policy; its refusal, if it refuses.
    fn enqueue(&mut self, j: JobIdx) -> Result<(), apiary_policy::PolicyError> {
        self.world.submit(j);
        let ctx = Ctx::new(&mut self.world, &mut self.actions, self.policy.spec());
        self.policy.admit(&ctx, j)
    }

    /// Checks a submission against the cluster and config.
    pub fn validate(&self, s: &JobSpec) -> Result<(), ApiError> {
        check_sizes(s)?;
        if s.gpus == 0 || s.gpus > MAX_JOB_GPUS {
            return Err(ApiError::bad(
                "gpus",
                format!("must be 1..={MAX_JOB_GPUS} (got {})", s.gpus),
            ));
        }
        if s.gpus > self.world.cluster.total_gpus {
            return Err(ApiError::bad(
                "gpus",
                format!(
                    "{} GPUs asked but the cluster has {}",
                    s.gpus, self.world.cluster.total_gpus
                ),
            ));
        }
        if s.command.is_empty() || s.command[0].is_empty() {
            return Err(ApiError::bad("command", "must name a program"));
        }
        if let Some(t) = &s.gpu_type {
            let of_type: u32 = self
                .nodes
                .iter()
                .filter(|n| &n.gpu_type == t)
                .map(|n| n.gpus)
                .sum();
            if of_type == 0 {
                let mut types: Vec<&str> = self.nodes.iter().map(|n| n.gpu_type.as_str()).collect();
                types.sort_unstable();
                types.dedup();
                return Err(ApiError::bad(
                    "gpu_type",
                    format!("no node has '{t}' GPUs (types: {})", types.join(", ")),
                ));
            }
            if s.gpus > of_type {
                return Err(ApiError::bad(
                    "gpus",
                    format!(
                        "{} GPUs asked but the cluster has {of_type} of type {t}",
                        s.gpus
                    ),
                ));
            }
            if self.policy.spec().has(Capability::Tenants)
                && self.cfg.sharing != "quota"
                && self.nodes.iter().any(|n| &n.gpu_type != t)
            {
                return Err(ApiError::bad(
                    "gpu_type",
                    format!(
                        "with {} sharing VCs own node cells of every GPU type",
                        self.cfg.sharing
                    ),
                ));
            }
        }
        if !self.cfg.vcs.is_empty() {
            let vc = s.vc.as_deref().unwrap_or("default");
            let Some(v) = self.cfg.vcs.iter().find(|v| v.name == vc) else {
                let known: Vec<&str> = self.cfg.vcs.iter().map(|v| v.name.as_str()).collect();
                return Err(ApiError::bad(
                    "vc",
                    format!("unknown VC '{vc}' (known: {})", known.join(", ")),
                ));
            };
            if self.cfg.sharing == "quota"
                && let Some(q) = v.quota_gpus
                && s.gpus as u64 > q
            {
                return Err(ApiError::bad(
                    "gpus",
                    format!("VC {vc}'s quota is {q} GPUs"),
                ));
            }
        }
        if let Some(d) = s.estimated_duration_s
            && !(d.is_finite() && (0.0..1e10).contains(&d))
        {
            return Err(ApiError::bad(
                "estimated_duration_s",
                "must be a non-negative number of seconds",
            ));
        }
        // 9999-12-31T23:59:59Z: later deadlines are typos, and the bound keeps
        // deadline arithmetic in milliseconds far from overflow.
        if let Some(d) = s.deadline_unix_s
            && d > 253_402_300_799
        {
            return Err(ApiError::bad(
                "deadline_unix_s",
                "must be a Unix time in seconds before the year 10000",
            ));
        }
        if s.restart.max_restarts > 1000 {
            return Err(ApiError::bad("restart.max_restarts", "at most 1000"));
        }
        let vc = s.vc.as_deref().unwrap_or("default");
        let max = self.cfg.max_jobs_per_vc;
        if self.active.get(vc).copied().unwrap_or(0) >= max {
            return Err(ApiError::too_many(
                "vc",
                format!("VC {vc} has {max} unfinished jobs, its limit (max_jobs_per_vc)"),
            ));
        }
        Ok(())
    }

    /// Accepts a job: queued now, durable once the caller persisted [`Core::take_dirty`].
    pub fn submit(&mut self, spec: JobSpec, now: u64) -> Result<u64, ApiError> {
        self.validate(&spec)?;
        self.advance(now);
        let id = self.next_id;
        let mut rec = JobRecord {
            schema_version: SCHEMA_VERSION,
            id,
            vc: spec.vc.clone().unwrap_or_else(|| "default".into()),
            spec,
            state: JobState::Queued,
            submitted_ms: now,
            attempt: 0,
            parts: Vec::new(),
            history: Vec::new(),
            stopping: Vec::new(),
        };
        note(&mut rec, now, "queued", String::new());
        let vc = rec.vc.clone();
        let j = self.add_to_world(rec);
        if let Err(e) = self.enqueue(j) {
            // Refused before anyone was told it was accepted: it leaves no trace.
            self.world.pop_job(j);
            self.jobs.pop();
            self.by_id.remove(&id);
            return Err(ApiError::refused(e.to_string()));
        }
        self.next_id += 1;
        self.next_id_dirty = true;
        *self.active.entry(vc).or_insert(0) += 1;
        self.dirty.insert(j);
        self.counters.submissions += 1;
        Ok(id)
    }

    /// Rebuilds the state from stored records after a restart. Running jobs keep their
    /// GPUs; their agents confirm or lose them on their next heartbeats.
    pub fn recover(
        &mut self,
        mut records: Vec<JobRecord>,
        next_id: u64,
        cordoned: &BTreeSet<String>,
        now: u64,
    ) {
        self.advance(now);
        records.sort_by_key(|r| r.id);
        self.next_id = next_id.max(records.last().map_or(1, |r| r.id + 1));
        for rec in records {
            let state = rec.state;
            if !state.terminal() {
                *self.active.entry(rec.vc.clone()).or_insert(0) += 1;
            }
            let parts = rec.parts.clone();
            let j = self.add_to_world(rec);
            let admitted = match state {
                JobState::Queued | JobState::Running => self.enqueue(j),
                _ => Ok(()),
            };
            if let Err(e) = admitted {
                // A record the policy now refuses (its VC left the config, say): it
                // ends, with the reason, rather than waiting for ever.
                self.world.decline(j, e.to_string());
                if let Some(n) = self.active.get_mut(&self.jobs[j as usize].vc) {
                    *n = n.saturating_sub(1);
                }
                let r = &mut self.jobs[j as usize];
                r.state = JobState::Failed;
                note(r, now, "refused", e.to_string());
                self.dirty.insert(j);
                continue;
            }
            if state == JobState::Running {
                let mut p = Placement::default();
                let mut ok = true;
                for part in parts.iter().filter(|p| p.exit.is_none()) {
                    match self.node_ix.get(&part.node) {
                        Some(&n) => p.parts.push((n, mask_of(&part.gpus))),
                        None => ok = false,
                    }
                }
                p.parts.sort_unstable();
                let g = self.world.jobs[j as usize].gpus;
                // Parts that already exited still count as the job's GPUs until all
                // parts end: take them too.
                for part in parts.iter().filter(|p| p.exit.is_some()) {
                    if let Some(&n) = self.node_ix.get(&part.node) {
                        p.parts.push((n, mask_of(&part.gpus)));
                    }
                }
                p.parts.sort_unstable();
                if ok && p.gpus() == g && self.world.start(j, p) {
                    if let Some(t) = self.policy.tenancy() {
                        // HiveD may not take a record back into its VC's cells
                        // (the config changed): the job keeps running, outside them.
                        t.adopt(&self.world, j);
                    }
                } else {
                    let r = &mut self.jobs[j as usize];
                    r.state = JobState::Queued;
                    r.parts.clear();
                    note(
                        r,
                        now,
                        "requeued",
                        "its GPUs are no longer in the config".into(),
                    );
                    self.dirty.insert(j);
                }
            }
        }
        // Processes still stopping hold their GPUs (after every running job took its own).
        for j in 0..self.jobs.len() {
            let (id, stopping) = (self.jobs[j].id, self.jobs[j].stopping.clone());
            for s in stopping {
                let Some(&n) = self.node_ix.get(&s.node) else {
                    continue;
                };
                let p = Placement {
                    parts: vec![(n, mask_of(&s.gpus))],
                };
                if self.world.state.allocate(&p).is_ok() {
                    self.stopping.insert((id, s.attempt, n), mask_of(&s.gpus));
                    self.world.set_blocked(j as JobIdx, true);
                }
            }
        }
        for name in cordoned {
            if let Some(&n) = self.node_ix.get(name) {
                self.nodes[n as usize].cordoned = true;
            }
        }
        self.started = now;
    }

    fn record(&self, id: u64) -> Result<JobIdx, ApiError> {
        self.by_id
            .get(&id)
            .copied()
            .ok_or_else(|| ApiError::not_found(format!("no job {id}")))
    }

    /// One job.
    pub fn job(&self, id: u64) -> Result<&JobRecord, ApiError> {
        Ok(&self.jobs[self.record(id)? as usize])
    }

    /// Jobs, newest first, optionally of one VC or state.
    pub fn jobs(&self, vc: Option<&str>, state: Option<JobState>, limit: usize) -> Vec<&JobRecord> {
        self.jobs
            .iter()
            .rev()
            .filter(|r| vc.is_none_or(|v| r.vc == v))
            .filter(|r| state.is_none_or(|s| r.state == s))
            .take(limit)
            .collect()
    }

    /// Cancels a job; a running one is stopped on its nodes.
    pub fn cancel(&mut self, id: u64, now: u64) -> Result<(), ApiError> {
        let j = self.record(id)?;
        self.advance(now);
        match self.jobs[j as usize].state {
            s if s.terminal() => {
                return Err(ApiError::conflict(format!(
                    "job {id} is already {}",
                    s.as_str()
                )));
            }
            JobState::Queued => {
                self.world.withdraw(j);
            }
            _ => {
                self.stop_attempt(j);
                let (id, attempt) = (self.jobs[j as usize].id, self.jobs[j as usize].attempt);
                self.world.finish(j);
                self.fence_stopping(id, attempt);
            }
        }
        let ctx = Ctx::new(&mut self.world, &mut self.actions, self.policy.spec());
        self.policy.on_finish(&ctx, j);
        self.counters.count("cancel");
        let r = &mut self.jobs[j as usize];
        if let Some(n) = self.active.get_mut(&r.vc) {
            *n = n.saturating_sub(1);
        }
        r.state = JobState::Cancelled;
        note(r, now, "cancelled", String::new());
        self.dirty.insert(j);
        Ok(())
    }

    /// Holds the GPUs of the current attempt's live parts for their stopping processes.
    /// The world must still hold the placement (this re-takes it after release).
    fn stop_attempt(&mut self, j: JobIdx) {
        let id = self.jobs[j as usize].id;
        let attempt = self.jobs[j as usize].attempt;
        for part in self.jobs[j as usize].parts.clone() {
            if part.exit.is_some() {
                continue;
            }
            if let Some(&n) = self.node_ix.get(&part.node) {
                self.stopping.insert((id, attempt, n), mask_of(&part.gpus));
            }
        }
        let stopping = self
            .stopping
            .range((id, 0, 0)..=(id, u32::MAX, u32::MAX))
            .next()
            .is_some();
        self.world.set_blocked(j, stopping);
    }

    /// After the world released a job's GPUs, takes back those of its stopping parts.
    fn fence_stopping(&mut self, id: u64, attempt: u32) {
        let keys: Vec<(u64, u32, u32)> = self
            .stopping
            .range((id, attempt, 0)..=(id, attempt, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            let p = Placement {
                parts: vec![(k.2, self.stopping[&k])],
            };
            if self.world.state.allocate(&p).is_err() {
                // Someone else holds them: nothing to fence (cannot happen when callers
                // fence right after the release).
                self.stopping.remove(&k);
            }
        }
    }

    /// Ends the current attempt: all parts exited (or were lost).
    fn end_attempt(&mut self, j: JobIdx, now: u64, lost_node: bool) {
        let r = &self.jobs[j as usize];
        let ok = r.parts.iter().all(|p| p.exit == Some(0));
        let restarts_left = r.attempt <= r.spec.restart.max_restarts;
        let retry = !ok
            && restarts_left
            && if lost_node {
                r.spec.restart.on_node_loss
            } else {
                r.spec.restart.on_failure
            };
        let (id, attempt) = (r.id, r.attempt);
        // Back to the queue, or over; either way the GPUs of parts still stopping stay
        // held.
        if retry {
            self.world.preempt(j);
        } else {
            self.world.finish(j);
        }
        self.fence_stopping(id, attempt);
        let ctx = Ctx::new(&mut self.world, &mut self.actions, self.policy.spec());
        self.counters.count(match (retry, ok) {
            (true, _) => "requeue",
            (false, true) => "succeed",
            (false, false) => "fail",
        });
        if retry {
            self.policy.on_requeue(&ctx, j);
            let r = &mut self.jobs[j as usize];
            r.state = JobState::Queued;
            let why = if lost_node {
                "a node was lost"
            } else {
                "it failed"
            };
            note(r, now, "requeued", format!("attempt {attempt}: {why}"));
        } else {
            self.policy.on_finish(&ctx, j);
            let r = &mut self.jobs[j as usize];
            if let Some(n) = self.active.get_mut(&r.vc) {
                *n = n.saturating_sub(1);
            }
            r.state = if ok {
                JobState::Succeeded
            } else {
                JobState::Failed
            };
            let codes: Vec<String> = r
                .parts
                .iter()
                .map(|p| format!("{}={}", p.node, p.exit.unwrap_or(-1)))
                .collect();
            note(r, now, r.state.as_str(), codes.join(" "));
        }
        self.dirty.insert(j);
    }

    /// One part of job `j`'s current attempt ended with `code`.
    fn part_exited(&mut self, j: JobIdx, node: u32, code: i32, now: u64, lost: bool) {
        let name = self.nodes[node as usize].name.clone();
        let r = &mut self.jobs[j as usize];
        let Some(part) = r
            .parts
            .iter_mut()
            .find(|p| p.node == name && p.exit.is_none())
        else {
            return;
        };
        part.exit = Some(code);
        self.dirty.insert(j);
        let all_done = r.parts.iter().all(|p| p.exit.is_some());
        let failed = code != 0;
        if !all_done && failed {
            // A failed part ends the attempt: stop the others.
            self.stop_attempt(j);
            for p in self.jobs[j as usize].parts.iter_mut() {
                if p.exit.is_none() {
                    p.exit = Some(-1);
                }
            }
        }
        if all_done || failed {
            self.end_attempt(j, now, lost);
        }
    }

    /// An agent's heartbeat: marks the node up and applies its reports. Returns the
    /// node, for [`Core::reply`] once the caller persisted.
    pub fn heartbeat(&mut self, hb: &Heartbeat, now: u64) -> Result<u32, ApiError> {
        let n = *self.node_ix.get(&hb.node).ok_or_else(|| {
            ApiError::bad(
                "node",
                format!("'{}' is not a node of the server's config", hb.node),
            )
        })?;
        let declared = self.nodes[n as usize].gpus;
        if hb.gpus != declared {
            return Err(ApiError::bad(
                "gpus",
                format!(
                    "node {} has {declared} GPUs in the server's config but its agent reports {}",
                    hb.node, hb.gpus
                ),
            ));
        }
        self.advance(now);
        {
            let node = &mut self.nodes[n as usize];
            node.last_heartbeat = Some(now);
            let health = if hb.shutting_down {
                NodeHealth::Down
            } else {
                NodeHealth::Up
            };
            if node.health != health
                && (node.health == NodeHealth::Down || health == NodeHealth::Down)
                && let Some(t) = self.policy.tenancy()
            {
                t.node_health(&node.name, health == NodeHealth::Up);
            }
            node.health = health;
        }
        for e in &hb.exited {
            self.keep_tail(n, e);
            self.exited(n, e.job, e.attempt, e.code, e.lost, now);
        }
        let running: BTreeSet<AttemptRef> = hb.running.iter().copied().collect();
        let exited: BTreeSet<(u64, u32)> = hb.exited.iter().map(|e| (e.job, e.attempt)).collect();
        // Parts this agent had started that it no longer knows: lost with it.
        let name = self.nodes[n as usize].name.clone();
        // (job, whether lost) — a part reported running for the first time is started.
        let mut seen = Vec::new();
        for &j in self.running_on(n).iter() {
            let r = &self.jobs[j as usize];
            let key = AttemptRef {
                job: r.id,
                attempt: r.attempt,
            };
            if let Some(p) = r.parts.iter().find(|p| p.node == name && p.exit.is_none()) {
                let started = self.started_parts(r).contains(&name);
                let _ = p;
                if running.contains(&key) {
                    if !started {
                        seen.push((j, false));
                    }
                } else if started && !exited.contains(&(r.id, r.attempt)) {
                    seen.push((j, true));
                }
            }
        }
        // A started part the agent neither runs nor reported ended is unknown, not
        // lost: an agent that lost its records may have left it running. It is given
        // up only after the node timeout and grace period that a silent node gets.
        let lost_after = self.lost_after_ms();
        let mut still_missing = BTreeSet::new();
        for (j, is_missing) in seen {
            let key = (self.jobs[j as usize].id, self.jobs[j as usize].attempt, n);
            if is_missing {
                still_missing.insert(key);
                let since = *self.missing.entry(key).or_insert(now);
                if now.saturating_sub(since) > lost_after {
                    self.missing.remove(&key);
                    self.part_exited(j, n, -1, now, true);
                }
            } else {
                self.mark_started(j, &name);
            }
        }
        self.missing
            .retain(|k, _| k.2 != n || still_missing.contains(k));
        Ok(n)
    }

    /// Keeps an exited process's output tail on its part of the current attempt.
    fn keep_tail(&mut self, n: u32, e: &Exit) {
        if e.output_tail.is_empty() {
            return;
        }
        let Some(&j) = self.by_id.get(&e.job) else {
            return;
        };
        let name = &self.nodes[n as usize].name;
        let r = &mut self.jobs[j as usize];
        if r.attempt != e.attempt {
            return;
        }
        if let Some(p) = r.parts.iter_mut().find(|p| &p.node == name) {
            let t = &e.output_tail;
            let mut cut = t.len().saturating_sub(OUTPUT_TAIL_BYTES);
            while !t.is_char_boundary(cut) {
                cut += 1;
            }
            p.output_tail = t[cut..].to_string();
            self.dirty.insert(j);
        }
    }

    fn started_parts(&self, r: &JobRecord) -> BTreeSet<String> {
        r.history
            .iter()
            .rev()
            .take_while(|t| t.event != "running")
            .filter(|t| t.event == "started")
            .map(|t| t.detail.clone())
            .collect()
    }

    fn mark_started(&mut self, j: JobIdx, node: &str) {
        let at = self.world.now;
        let r = &mut self.jobs[j as usize];
        note(r, at, "started", node.into());
        self.dirty.insert(j);
    }

    fn exited(&mut self, n: u32, job: u64, attempt: u32, code: i32, lost: bool, now: u64) {
        if let Some(mask) = self.stopping.remove(&(job, attempt, n)) {
            let p = Placement {
                parts: vec![(n, mask)],
            };
            let _ = self.world.state.release(&p);
            if let Some(&j) = self.by_id.get(&job) {
                let stopping = self
                    .stopping
                    .range((job, 0, 0)..=(job, u32::MAX, u32::MAX))
                    .next()
                    .is_some();
                self.world.set_blocked(j, stopping);
                self.dirty.insert(j);
            }
            return;
        }
        let Some(&j) = self.by_id.get(&job) else {
            return;
        };
        let r = &self.jobs[j as usize];
        if r.state == JobState::Running && r.attempt == attempt {
            self.part_exited(j, n, code, now, lost);
        }
    }

    fn running_on(&self, n: u32) -> Vec<JobIdx> {
        let name = &self.nodes[n as usize].name;
        self.world
            .running()
            .iter()
            .copied()
            .filter(|&j| {
                self.jobs[j as usize]
                    .parts
                    .iter()
                    .any(|p| &p.node == name && p.exit.is_none())
            })
            .collect()
    }

    /// What node `n`'s agent must do now.
    pub fn reply(&self, n: u32, hb: &Heartbeat) -> HeartbeatReply {
        let name = &self.nodes[n as usize].name;
        let running: BTreeSet<AttemptRef> = hb.running.iter().copied().collect();
        let mut start = Vec::new();
        let mut stop = Vec::new();
        let mut jobs = self.running_on(n);
        jobs.sort_unstable_by_key(|&j| self.jobs[j as usize].id);
        for j in jobs {
            let r = &self.jobs[j as usize];
            let key = AttemptRef {
                job: r.id,
                attempt: r.attempt,
            };
            if running.contains(&key) {
                continue;
            }
            let Some(part) = r.parts.iter().find(|p| &p.node == name) else {
                continue;
            };
            let rank = r.parts.iter().position(|p| &p.node == name).unwrap_or(0);
            let mut env = r.spec.env.clone();
            env.insert("APIARY_JOB_ID".into(), r.id.to_string());
            env.insert("APIARY_ATTEMPT".into(), r.attempt.to_string());
            env.insert("APIARY_NODE_RANK".into(), rank.to_string());
            env.insert("APIARY_NUM_NODES".into(), r.parts.len().to_string());
            env.insert("APIARY_MASTER".into(), r.parts[0].node.clone());
            env.insert("APIARY_VC".into(), r.vc.clone());
            env.insert("APIARY_NODE".into(), name.clone());
            start.push(Launch {
                job: r.id,
                attempt: r.attempt,
                command: r.spec.command.clone(),
                env,
                workdir: r.spec.workdir.clone(),
                gpus: part.gpus.clone(),
            });
        }
        for &(job, attempt, node) in self.stopping.keys() {
            if node == n {
                stop.push(AttemptRef { job, attempt });
            }
        }
        // Processes the agent runs that the server does not assign here: stop them.
        for a in &hb.running {
            let current = self.by_id.get(&a.job).is_some_and(|&j| {
                let r = &self.jobs[j as usize];
                r.state == JobState::Running
                    && r.attempt == a.attempt
                    && r.parts.iter().any(|p| &p.node == name && p.exit.is_none())
            });
            if !current && !stop.contains(a) {
                stop.push(*a);
            }
        }
        HeartbeatReply {
            start,
            stop,
            acked: hb
                .exited
                .iter()
                .map(|e| AttemptRef {
                    job: e.job,
                    attempt: e.attempt,
                })
                .collect(),
            interval_s: self.cfg.heartbeat_interval_s,
            grace_s: self.cfg.grace_s,
            node_timeout_s: self.cfg.node_timeout_s,
        }
    }

    /// Marks nodes down whose agents went silent (no new jobs there), and once the grace
    /// period has passed too, ends their jobs' attempts there (requeued or failed per the
    /// job's restart policy) and forgets the processes stopping there. Returns whether
    /// anything changed.
    pub fn check_nodes(&mut self, now: u64) -> bool {
        self.advance(now);
        let timeout = (self.cfg.node_timeout_s * 1000.0) as u64;
        let lost_after = self.lost_after_ms();
        let mut changed = false;
        for n in 0..self.nodes.len() as u32 {
            let node = &self.nodes[n as usize];
            let silent = now.saturating_sub(node.last_heartbeat.unwrap_or(self.started));
            if node.health != NodeHealth::Down && silent > timeout {
                self.nodes[n as usize].health = NodeHealth::Down;
                changed = true;
                // HiveD's bad hardware: its VCs' cells there become doomed.
                if let Some(t) = self.policy.tenancy() {
                    t.node_health(&self.nodes[n as usize].name, false);
                }
            }
            if self.nodes[n as usize].health != NodeHealth::Down || silent <= lost_after {
                continue;
            }
            for j in self.running_on(n) {
                changed = true;
                self.part_exited(j, n, -1, now, true);
            }
            let keys: Vec<_> = self.stopping.keys().filter(|k| k.2 == n).copied().collect();
            for (job, attempt, node) in keys {
                self.exited(node, job, attempt, -1, true, now);
            }
        }
        changed
    }

    /// How long a node (or a part of it) stays silent before its jobs are given up and
    /// may run elsewhere: the node timeout plus the grace period.
    fn lost_after_ms(&self) -> u64 {
        ((self.cfg.node_timeout_s + self.cfg.grace_s) * 1000.0) as u64
    }

    /// Cordons (no new jobs) or uncordons a node.
    pub fn cordon(&mut self, node: &str, on: bool) -> Result<(), ApiError> {
        let n = *self
            .node_ix
            .get(node)
            .ok_or_else(|| ApiError::not_found(format!("no node {node}")))?;
        if self.nodes[n as usize].cordoned != on {
            self.nodes[n as usize].cordoned = on;
            self.dirty_cordons.push((node.to_string(), on));
        }
        Ok(())
    }

    /// Cordons a node and sends its running jobs back to the queue (their processes
    /// are stopped; their GPUs stay held until that is confirmed). Returns how many.
    pub fn drain(&mut self, node: &str, now: u64) -> Result<usize, ApiError> {
        self.cordon(node, true)?;
        self.advance(now);
        let n = self.node_ix[node];
        let jobs = self.running_on(n);
        for &j in &jobs {
            self.stop_attempt(j);
            let (id, attempt) = (self.jobs[j as usize].id, self.jobs[j as usize].attempt);
            self.world.preempt(j);
            self.fence_stopping(id, attempt);
            let ctx = Ctx::new(&mut self.world, &mut self.actions, self.policy.spec());
            self.policy.on_requeue(&ctx, j);
            self.counters.count("requeue");
            let r = &mut self.jobs[j as usize];
            for p in r.parts.iter_mut().filter(|p| p.exit.is_none()) {
                p.exit = Some(-1);
            }
            r.state = JobState::Queued;
            note(
                r,
                now,
                "requeued",
                format!("attempt {attempt}: node {node} drained"),
            );
            self.dirty.insert(j);
        }
        Ok(jobs.len())
    }

    /// Holds the free GPUs of down and cordoned nodes; gives back those of nodes that
    /// are neither.
    fn reblock(&mut self) {
        for n in 0..self.nodes.len() {
            let node = &self.nodes[n];
            let unusable = node.cordoned || node.health == NodeHealth::Down;
            if unusable {
                let free = self.world.state.free_mask(n as u32);
                if free != 0 {
                    let p = Placement {
                        parts: vec![(n as u32, free)],
                    };
                    if self.world.state.allocate(&p).is_ok() {
                        self.nodes[n].blocked |= free;
                    }
                }
            } else if node.blocked != 0 {
                let p = Placement {
                    parts: vec![(n as u32, node.blocked)],
                };
                let _ = self.world.state.release(&p);
                self.nodes[n].blocked = 0;
            }
        }
    }

    /// A scheduling pass: the policy starts and preempts jobs. Returns whether it did.
    pub fn schedule(&mut self, now: u64) -> bool {
        self.advance(now);
        self.reblock();
        if let Some(t) = self.policy.tenancy() {
            // Live, GPUs also come back outside the tenants' jobs (stopping processes
            // end, nodes return): every VC looks again, as cheap as the pass itself.
            t.refresh();
        }
        self.actions.clear();
        let (wake, error) = {
            let mut ctx = Ctx::new(&mut self.world, &mut self.actions, self.policy.spec());
            self.policy.schedule(&mut ctx);
            (ctx.wake(), ctx.take_error())
        };
        if let Some(e) = error {
            // Config load refuses policies whose capabilities the service cannot host,
            // so this is a policy bug: say so, and keep serving.
            eprintln!("apiary: scheduling pass: policy {e}");
        }
        self.wake = wake;
        let fenced = self.world.take_fenced();
        let actions = std::mem::take(&mut self.actions);
        for a in &actions {
            match *a {
                Action::Start(j) => {
                    self.counters.count("start");
                    self.started_attempt(j, now);
                }
                Action::Preempt(j) => {
                    self.counters.count("preempt");
                    let r = &mut self.jobs[j as usize];
                    r.state = JobState::Queued;
                    note(r, now, "preempted", format!("attempt {}", r.attempt));
                    self.dirty.insert(j);
                }
                // Speed factors shape simulated progress only; live jobs run as fast
                // as they run.
                Action::Speed(_) => {}
            }
        }
        for (j, p) in fenced {
            let (id, attempt) = (self.jobs[j as usize].id, self.jobs[j as usize].attempt);
            for &(n, mask) in &p.parts {
                self.stopping.insert((id, attempt, n), mask);
            }
            self.world.set_blocked(j, true);
            self.dirty.insert(j);
        }
        let acted = !actions.is_empty();
        self.actions = actions;
        if self
            .util
            .back()
            .is_none_or(|&(t, _)| now >= t + UTIL_SAMPLE_MS)
        {
            if self.util.len() == UTIL_SAMPLES {
                self.util.pop_front();
            }
            let busy = self.gpus_allocated();
            self.util.push_back((now, busy));
        }
        acted
    }

    /// Utilisation samples, oldest first: (unix ms, GPUs allocated).
    pub fn utilisation(&self) -> impl Iterator<Item = &(u64, u64)> {
        self.util.iter()
    }

    /// Every node's GPUs and what uses each, in config order.
    pub fn gpu_map(&self) -> Vec<(String, Vec<GpuUse>)> {
        let mut map: Vec<(String, Vec<GpuUse>)> = self
            .nodes
            .iter()
            .map(|n| {
                let mut v = vec![GpuUse::Free; n.gpus as usize];
                for (g, slot) in v.iter_mut().enumerate() {
                    if n.blocked & (1 << g) != 0 {
                        *slot = GpuUse::Blocked;
                    }
                }
                (n.name.clone(), v)
            })
            .collect();
        for &j in self.world.running() {
            let r = &self.jobs[j as usize];
            for p in &r.parts {
                if let Some(&n) = self.node_ix.get(&p.node) {
                    for &g in &p.gpus {
                        if let Some(slot) = map[n as usize].1.get_mut(g as usize) {
                            *slot = GpuUse::Job(r.id, r.vc.clone());
                        }
                    }
                }
            }
        }
        for (&(job, _, n), &mask) in &self.stopping {
            for g in gpus_of(mask) {
                if let Some(slot) = map[n as usize].1.get_mut(g as usize) {
                    *slot = GpuUse::Stopping(job);
                }
            }
        }
        map
    }

    fn started_attempt(&mut self, j: JobIdx, now: u64) {
        let parts: Vec<Part> = self.world.rt[j as usize]
            .placement
            .parts
            .iter()
            .map(|&(n, mask)| Part {
                node: self.nodes[n as usize].name.clone(),
                gpus: gpus_of(mask),
                exit: None,
                output_tail: String::new(),
            })
            .collect();
        let r = &mut self.jobs[j as usize];
        r.attempt += 1;
        r.state = JobState::Running;
        let detail = parts
            .iter()
            .map(|p| format!("{}{:?}", p.node, p.gpus))
            .collect::<Vec<_>>()
            .join(" ");
        r.parts = parts;
        note(r, now, "running", detail);
        self.dirty.insert(j);
    }

    /// Records how long a scheduling pass took.
    pub fn observe_pass(&mut self, secs: f64) {
        let b = PASS_BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(PASS_BUCKETS.len());
        self.counters.pass_buckets[b] += 1;
        self.counters.pass_sum += secs;
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Creates a VC or changes its quota (admin). HiveD's cells change only with the
    /// config and a restart, since they are bound to physical cells.
    pub fn set_vc(&mut self, name: &str, quota_gpus: Option<u64>) -> Result<(), ApiError> {
        if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_whitespace() || c == '/')
        {
            return Err(ApiError::bad(
                "name",
                "1..=64 characters, no spaces or slashes",
            ));
        }
        match self.cfg.sharing.as_str() {
            "hived" | "private" => {
                return Err(ApiError::conflict(format!(
                    "with {} sharing, VCs and their cells change with the config and a restart",
                    self.cfg.sharing
                )));
            }
            "quota" if quota_gpus.is_none() => {
                return Err(ApiError::bad("quota_gpus", "quota sharing needs a quota"));
            }
            _ => {}
        }
        let v = crate::config::VcConfig {
            name: name.to_string(),
            quota_gpus,
            nodes: None,
        };
        match self.cfg.vcs.iter_mut().find(|x| x.name == name) {
            Some(x) => *x = v.clone(),
            None => self.cfg.vcs.push(v.clone()),
        }
        if let Some(t) = self.policy.tenancy() {
            t.set_share(TenantShare {
                name: name.to_string(),
                nodes: 0,
                gpus: quota_gpus.unwrap_or(0),
            })
            .map_err(|e| ApiError::conflict(e.to_string()))?;
        }
        self.dirty_vcs.push(v);
        Ok(())
    }

    /// Per configured VC: its quota or cells, and its jobs queued and running.
    pub fn vcs(&self) -> Vec<serde_json::Value> {
        self.cfg
            .vcs
            .iter()
            .map(|v| {
                let (mut queued, mut running, mut gpus) = (0u64, 0u64, 0u64);
                for r in self.jobs.iter().filter(|r| r.vc == v.name) {
                    match r.state {
                        JobState::Queued => queued += 1,
                        JobState::Running => {
                            running += 1;
                            gpus += r.spec.gpus as u64;
                        }
                        _ => {}
                    }
                }
                serde_json::json!({
                    "name": v.name,
                    "sharing": self.cfg.sharing,
                    "quota_gpus": v.quota_gpus,
                    "nodes": v.nodes,
                    "gpus_running": gpus,
                    "queued": queued,
                    "running": running,
                })
            })
            .collect()
    }

    /// Queued jobs per VC.
    pub fn queued_by_vc(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for r in &self.jobs {
            if r.state == JobState::Queued {
                *m.entry(r.vc.clone()).or_insert(0) += 1;
            }
        }
        m
    }

    /// When the policy asked to be called again, unix ms.
    pub fn wake(&self) -> Option<u64> {
        self.wake
    }

    /// Records to persist since the last call.
    pub fn take_dirty(&mut self) -> Dirty {
        let jobs = std::mem::take(&mut self.dirty)
            .into_iter()
            .map(|j| {
                let mut r = self.jobs[j as usize].clone();
                r.stopping = self
                    .stopping
                    .range((r.id, 0, 0)..=(r.id, u32::MAX, u32::MAX))
                    .map(|(&(_, attempt, n), &mask)| StoppingPart {
                        attempt,
                        node: self.nodes[n as usize].name.clone(),
                        gpus: gpus_of(mask),
                    })
                    .collect();
                r
            })
            .collect();
        Dirty {
            jobs,
            next_id: std::mem::take(&mut self.next_id_dirty).then_some(self.next_id),
            cordons: std::mem::take(&mut self.dirty_cordons),
            vcs: std::mem::take(&mut self.dirty_vcs),
        }
    }

    /// Node status.
    pub fn nodes(&self) -> Vec<NodeStatus> {
        (0..self.nodes.len() as u32)
            .map(|n| {
                let node = &self.nodes[n as usize];
                let mut jobs: Vec<u64> = self
                    .running_on(n)
                    .iter()
                    .map(|&j| self.jobs[j as usize].id)
                    .collect();
                jobs.sort_unstable();
                NodeStatus {
                    name: node.name.clone(),
                    gpus: node.gpus,
                    gpu_type: node.gpu_type.clone(),
                    health: node.health,
                    cordoned: node.cordoned,
                    free_gpus: self.world.state.free_on(n),
                    jobs,
                    last_heartbeat_ms: node.last_heartbeat,
                }
            })
            .collect()
    }

    /// Cluster summary.
    pub fn cluster(&self) -> ClusterStatus {
        let mut jobs = BTreeMap::new();
        for r in &self.jobs {
            *jobs.entry(r.state.as_str().to_string()).or_insert(0) += 1;
        }
        let mut nodes = BTreeMap::new();
        for n in &self.nodes {
            let h = match n.health {
                NodeHealth::Unknown => "unknown",
                NodeHealth::Up => "up",
                NodeHealth::Down => "down",
            };
            *nodes.entry(h.to_string()).or_insert(0) += 1;
        }
        ClusterStatus {
            policy: self.cfg.policy.clone(),
            params: self.params.0.clone(),
            gpus_total: self.world.cluster.total_gpus as u64,
            gpus_allocated: self.gpus_allocated(),
            jobs,
            nodes,
        }
    }

    fn gpus_allocated(&self) -> u64 {
        self.world
            .running()
            .iter()
            .map(|&j| self.world.jobs[j as usize].gpus as u64)
            .sum()
    }

    /// Jobs waiting.
    pub fn queued(&self) -> usize {
        self.world.pending_count()
    }

    /// Jobs in the world by status, for tests: (pending, running).
    pub fn counts(&self) -> (usize, usize) {
        (
            self.world.pending_count(),
            self.world
                .rt
                .iter()
                .filter(|r| r.status == Status::Running)
                .count(),
        )
    }
}
