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

mod adaptive;
mod agents;
mod elastic;
mod error;
mod history;
mod instances;
mod jobs;
mod knobs;
mod online;
mod packing;
mod shares;
mod views;

pub use error::{ApiError, CoreError};
pub(crate) use history::ended_at;
pub use jobs::JobQuery;

use crate::config::ServerConfig;
use crate::types::*;
use apiary_model::{Cluster, ClusterSpec, NodeGroup, Placement, SwitchSpec, Time};
use apiary_policy::{Action, Declared, JobIdx, Params, Pass, Policy, TenantShare, World};
use std::collections::{BTreeMap, BTreeSet};

/// A job's run time when the user gives no estimate (SJF puts such jobs last).
const UNKNOWN_DURATION_MS: Time = 10 * 365 * 24 * 3600 * 1000;
/// Largest GPU count a job may ask for.
pub const MAX_JOB_GPUS: u32 = 4096;

/// The most jobs one job may wait for (`after_ok`).
pub const MAX_DEPENDENCIES: usize = 64;

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
    /// GPUs held for jobs that share them ([`shares`]).
    shared: u64,
    /// The agent instance whose heartbeats the node takes (none heard since start).
    instance: Option<String>,
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
    /// Records that left the hot state: the caller appends them to the archive, then
    /// deletes them from the store.
    pub archived: Vec<JobRecord>,
    /// Nodes whose agent instance changed: (node, instance).
    pub instances: Vec<(String, String)>,
}

/// Why an attempt ended by a failure rather than by the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Its node went silent past the node timeout and grace.
    NodeLost,
    /// Its agent no longer knew its process.
    ProcessLost,
    /// Its agent stopped it, cut off from the server.
    AgentLost,
    /// Another agent took its node over.
    AgentReplaced,
    /// It exited with a failure code the job declared.
    ExitCode,
}

impl Failure {
    /// Every cause, in `/metrics` order.
    pub const ALL: [Failure; 5] = [
        Failure::NodeLost,
        Failure::ProcessLost,
        Failure::AgentLost,
        Failure::AgentReplaced,
        Failure::ExitCode,
    ];

    /// Its name in [`Counters::failures`] and `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            Failure::NodeLost => "node_lost",
            Failure::ProcessLost => "process_lost",
            Failure::AgentLost => "agent_lost",
            Failure::AgentReplaced => "agent_replaced",
            Failure::ExitCode => "exit_code",
        }
    }

    /// Why a requeued attempt ended, for its history.
    fn why(self) -> &'static str {
        match self {
            Failure::NodeLost | Failure::ProcessLost => "a node was lost",
            Failure::AgentLost => "its agent lost the server",
            Failure::AgentReplaced => "its node's agent was replaced",
            Failure::ExitCode => "it exited with a failure code it declared",
        }
    }
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
    /// Attempts ended by a failure rather than by the job, by cause: `node_lost` (its
    /// node went silent), `process_lost` (its agent no longer knew it), `agent_lost`
    /// (the agent stopped it, cut off from the server), `agent_replaced` (another
    /// agent took its node over), `exit_code` (a failure exit code the job declared).
    pub failures: BTreeMap<&'static str, u64>,
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

/// The most parts whose output the server keeps after they ended.
pub const LIVE_KEPT: usize = 4096;

/// The last bytes of one part's output, as its agent streams them.
#[derive(Clone, Debug, Default)]
struct LiveOutput {
    attempt: u32,
    /// The agent's next file offset: chunks before it were taken already.
    agent_next: u64,
    /// Position of `buf`'s first byte in the text stream.
    start: u64,
    buf: String,
    eof: bool,
    touched: u64,
}

/// A node going down or coming up, for the service's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    /// When, unix ms.
    pub at_ms: u64,
    /// The node.
    pub node: String,
    /// `down` or `up`.
    pub event: &'static str,
    /// Why.
    pub detail: String,
}

/// The scheduler.
pub struct Core {
    cfg: ServerConfig,
    params: Params,
    world: World,
    policy: Box<dyn Policy>,
    pass: Pass,
    jobs: Vec<JobRecord>,
    by_id: BTreeMap<u64, JobIdx>,
    next_id: u64,
    nodes: Vec<NodeRt>,
    node_ix: BTreeMap<String, u32>,
    /// GPUs held for processes asked to stop: (job id, attempt, node) → mask.
    stopping: BTreeMap<(u64, u32, u32), u64>,
    /// Shared GPUs, (node, GPU) → the processes holding part of each.
    shares: BTreeMap<(u32, u32), Vec<shares::Hold>>,
    /// GPU-sharing jobs that may be queued (stale entries are dropped as found).
    share_queue: BTreeSet<JobIdx>,
    /// `share_policy`'s placement state, if one packs the GPU-sharing jobs.
    packer: Option<packing::Packer>,
    dirty: BTreeSet<JobIdx>,
    dirty_cordons: Vec<(String, bool)>,
    dirty_vcs: Vec<crate::config::VcConfig>,
    next_id_dirty: bool,
    wake: Option<u64>,
    started: u64,
    /// GPU energy and carbon since the server started, charged between passes.
    energy: apiary_sim::observe::Energy,
    counters: Counters,
    /// (unix ms, GPUs allocated), at most one sample per [`UTIL_SAMPLE_MS`].
    util: std::collections::VecDeque<(u64, u64)>,
    /// Unfinished (queued or running) jobs per VC, against `max_jobs_per_vc`.
    active: BTreeMap<String, u64>,
    /// Started parts whose agent reported neither running nor exited, since when (unix
    /// ms): unknown, not lost, until the node timeout and grace period have passed.
    missing: BTreeMap<(u64, u32, u32), u64>,
    /// Nodes that went down or came up since the service last logged them.
    node_events: Vec<NodeEvent>,
    /// Agent instances replaced by another, newest last (at most
    /// [`instances::FENCED_KEPT`]): their heartbeats are refused.
    fenced: std::collections::VecDeque<(String, String)>,
    /// Parts a replaced agent instance may still run: (job, attempt, node) to the time
    /// their GPUs are freed.
    orphans: BTreeMap<(u64, u32, u32), u64>,
    /// Queued jobs held until the jobs they name in `after_ok` succeed.
    held: BTreeSet<JobIdx>,
    /// Recent output of parts, by job id and node, for `logs -f`; not persisted.
    live: BTreeMap<(u64, String), LiveOutput>,
    /// Each VC's records in the hot state, against its limits.
    records: BTreeMap<String, history::VcRecords>,
    /// Each job's bytes as counted in `records` (0 once it left).
    hot_bytes: Vec<u32>,
    /// Finished jobs counted in `records`' finished queues.
    finished_seen: BTreeSet<JobIdx>,
    /// Jobs that left the hot state: their end state and VC (the newest
    /// [`history::ENDED_KEPT`]).
    ended: BTreeMap<u64, (JobState, String)>,
    /// Records that left the hot state, for the caller to archive.
    to_archive: Vec<JobRecord>,
    /// Node bindings to persist.
    dirty_instances: Vec<(String, String)>,
    /// The cluster-wide index of each node's first GPU (online services' GPUs go by it).
    gpu_offsets: Vec<u64>,
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
    /// Shared by jobs: (job id, VC, thousandths) of each holder.
    Shared(Vec<(u64, String, u32)>),
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
    pub fn new(cfg: ServerConfig, now: u64) -> Result<Core, CoreError> {
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
        let mut cluster = spec.build()?;
        for (n, c) in cluster.nodes.iter_mut().zip(&cfg.nodes) {
            n.name = c.name.clone();
        }
        Core::on_cluster(cfg, cluster, now)
    }

    /// A scheduler over `cluster`, whose nodes are the config's in order (a replay keeps
    /// the simulated cluster's switches and links, so placements match the simulator's).
    pub fn on_cluster(cfg: ServerConfig, cluster: Cluster, now: u64) -> Result<Core, CoreError> {
        if cluster.nodes.len() != cfg.nodes.len()
            || cluster
                .nodes
                .iter()
                .zip(&cfg.nodes)
                .any(|(n, c)| n.name != c.name || n.gpus != c.gpus)
        {
            return Err(CoreError::NodesDiffer);
        }
        let (name, params) = cfg.policy_params();
        let mut policy = apiary_policy::registry::build(&name, &params)?;
        if let Some(t) = policy.tenancy() {
            t.set_table(live_table(&cfg));
        }
        policy.attach(&cluster)?;
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
                shared: 0,
                instance: None,
            })
            .collect();
        let node_ix = cfg
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i as u32))
            .collect();
        let gpu_offsets = apiary_model::online::gpu_offsets(cluster.nodes.iter().map(|n| n.gpus));
        let mut world = World::new(cluster, Vec::new());
        world.set_scorer(Box::new(apiary_sim::comm::AllreduceScorer::default()));
        world.now = now;
        world.fence_preemptions = true;
        world.honour_gpu_types = true;
        let allocates_cpus = policy
            .capabilities()
            .has(apiary_policy::Capability::CpuWorkers);
        let packer = packing::Packer::of(&cfg);
        let mut core = Core {
            cfg,
            params,
            world,
            policy,
            pass: Pass::default(),
            jobs: Vec::new(),
            by_id: BTreeMap::new(),
            next_id: 1,
            nodes,
            node_ix,
            stopping: BTreeMap::new(),
            shares: BTreeMap::new(),
            share_queue: BTreeSet::new(),
            packer,
            dirty: BTreeSet::new(),
            dirty_cordons: Vec::new(),
            dirty_vcs: Vec::new(),
            next_id_dirty: false,
            wake: None,
            started: now,
            energy: apiary_sim::observe::Energy::new(now, None, 1.0),
            counters: Counters::default(),
            util: std::collections::VecDeque::new(),
            active: BTreeMap::new(),
            missing: BTreeMap::new(),
            node_events: Vec::new(),
            fenced: Default::default(),
            orphans: BTreeMap::new(),
            held: BTreeSet::new(),
            live: BTreeMap::new(),
            records: BTreeMap::new(),
            hot_bytes: Vec::new(),
            finished_seen: BTreeSet::new(),
            ended: BTreeMap::new(),
            to_archive: Vec::new(),
            dirty_instances: Vec::new(),
            gpu_offsets,
        };
        if allocates_cpus {
            core.world.resources.cpu_pool = core.cpu_pool();
        }
        if core
            .policy
            .capabilities()
            .has(apiary_policy::Capability::Io)
        {
            // Checked at config load.
            let io = core.cfg.io.as_deref().unwrap_or("default");
            core.world.resources.storage = apiary_model::io::Storage::parse(io).ok();
        }
        core.serve_online();
        Ok(core)
    }

    /// The nodes that went down or came up since the last call, oldest first.
    pub fn take_node_events(&mut self) -> Vec<NodeEvent> {
        std::mem::take(&mut self.node_events)
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

    /// The grid's carbon intensity the carbon-aware policies read from now on (the
    /// server's `carbon_file`, read again when it changes).
    pub fn set_carbon(&mut self, series: apiary_model::energy::Intensity) {
        let series = std::sync::Arc::new(series);
        self.energy.set_intensity(series.clone());
        self.world.carbon = Some(series);
    }

    /// GPU energy and carbon since the server started (charged between scheduling
    /// passes, at the intensity of `carbon_file` or the documented constant).
    pub fn energy(&self) -> apiary_model::energy::EnergyReport {
        self.energy.snapshot()
    }

    /// The intensity the carbon-aware policies read now, g/kWh.
    pub fn intensity_now(&self) -> f64 {
        self.energy.intensity_at(self.world.now)
    }

    /// The world, for a driver that models its jobs' progress (the simulator's engine
    /// over simulated agents, [`crate::simulated`]).
    pub fn world_mut(&mut self) -> &mut World {
        &mut self.world
    }

    /// What the last scheduling pass did.
    pub fn last_actions(&self) -> &[Action] {
        &self.pass.actions
    }

    /// The policy's name (with `sharing`, the VC-sharing policy hosting `policy`).
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    fn advance(&mut self, now: u64) {
        use apiary_sim::observe::Observer as _;
        if now > self.world.now {
            self.energy.interval(&self.world, self.world.now, now);
        }
        self.world.now = self.world.now.max(now);
    }

    /// Holds the free GPUs of down and cordoned nodes; gives back those of nodes that
    /// are neither.
    fn reblock(&mut self) {
        for n in 0..self.nodes.len() {
            let node = &self.nodes[n];
            let unusable = node.cordoned || node.health == NodeHealth::Down;
            self.world.state.set_down(n as u32, unusable);
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
        self.pass.actions.clear();
        let who = Declared::of(self.policy.as_ref());
        if let Err(e) = self
            .pass
            .schedule(&mut self.world, self.policy.as_mut(), who)
        {
            // The mechanism it did not declare refused to open, so nothing undeclared
            // was applied; config load refuses policies whose capabilities the service
            // cannot host, so this is a policy bug: say so, and keep serving.
            eprintln!("apiary: scheduling pass refused: policy {e}");
        }
        self.wake = self.pass.wake;
        let fenced = self.world.take_fenced();
        let actions = std::mem::take(&mut self.pass.actions);
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
                    self.drop_knobs(j);
                    self.dirty.insert(j);
                }
                // Speed factors, stalls, caps, holds and ends shape simulated progress
                // only; live jobs run as fast as they run. A resize in place cannot
                // happen: the world fences preemptions, so a resized job stops (Preempt)
                // and restarts at its new size (Start).
                Action::Resize(_)
                | Action::Speed(_)
                | Action::Stall(_)
                | Action::Cap(_)
                | Action::Hold(_)
                | Action::End(_) => {}
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
        self.take_knobs();
        let declined = self.end_declined(now);
        let shared = self.share_pass(now);
        let acted = !actions.is_empty() || shared || declined;
        self.pass.actions = actions;
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

    /// When the policy asked to be called again, unix ms.
    pub fn wake(&self) -> Option<u64> {
        self.wake
    }

    /// Records to persist since the last call.
    pub fn take_dirty(&mut self) -> Dirty {
        let changed: Vec<JobIdx> = self.dirty.iter().copied().collect();
        self.track_finished(&changed);
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
                    .chain(self.stopping_share_parts(r.id))
                    .collect();
                r
            })
            .collect();
        Dirty {
            jobs,
            next_id: std::mem::take(&mut self.next_id_dirty).then_some(self.next_id),
            cordons: std::mem::take(&mut self.dirty_cordons),
            vcs: std::mem::take(&mut self.dirty_vcs),
            archived: std::mem::take(&mut self.to_archive),
            instances: std::mem::take(&mut self.dirty_instances),
        }
    }
}
