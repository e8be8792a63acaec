//! The live service as a backend of the simulator's engine: a trace run through
//! [`Core`], the service's own state machine, behind simulated agents, with no
//! sockets or sleeping.
//!
//! The engine ([`apiary_sim::Engine`], the same loop the simulator runs) owns time:
//! jobs are submitted through the API's checks at their trace times, and when the
//! engine's model says a job's work is done, each of its simulated agents reports its
//! part's exit, with zero latency (the agents stop preempted processes at once,
//! [`Core::stop_instantly`]). Everything in between is the live code: admission, the
//! policy's pass, attempts, parts and exits. So `apiary simulate --driver live` tests
//! the live path at trace scale, and its jobs.csv equals the simulator's byte for byte
//! except where `docs/architecture.md` says why not.

use crate::config::{NodeConfig, ServerConfig, VcConfig};
use crate::core::Core;
use crate::types::{Exit, Heartbeat, JobSpec, RestartPolicy};
use apiary_model::{Cluster, Job, Time};
use apiary_policy::{JobIdx, Params, Pass, PolicyError, World};
use apiary_sim::{Backend, Config};
use std::collections::BTreeMap;

/// Why the live service could not be set up for a run.
#[derive(Debug, thiserror::Error)]
pub enum LiveSetupError {
    /// The cluster cannot be declared to the service.
    #[error("cluster {cluster}: node {node} has {gpus} GPUs; the live service takes 1 to 64")]
    Node {
        /// The cluster.
        cluster: String,
        /// The node.
        node: String,
        /// Its GPUs.
        gpus: u32,
    },
    /// The policy divides the cluster among tenants in a way the service does not know.
    #[error("{policy} divides the cluster among tenants in a way the live service does not know")]
    Sharing {
        /// The policy.
        policy: String,
    },
    /// The policy resizes jobs, and trace jobs reach the service as rigid submissions.
    #[error(
        "{policy} resizes jobs, which the live driver does not replay: trace jobs reach the \
         service as rigid API submissions without their throughput tables (`apiary serve` \
         runs it for jobs submitted with --elastic)"
    )]
    Elastic {
        /// The policy.
        policy: String,
    },
    /// The policy allocates a resource whose effect on speed the live driver does not
    /// model.
    #[error(
        "{policy} gives jobs {what}, which the live driver does not replay: the \
         simulator's model runs a trace job at the speed they give, and the live driver's \
         jobs run at their GPUs' (`apiary serve` runs it for {served})"
    )]
    Unmodelled {
        /// The policy.
        policy: String,
        /// What it gives.
        what: &'static str,
        /// What `apiary serve` runs it for.
        served: &'static str,
    },
    /// The policy or its parameters.
    #[error(transparent)]
    Param(#[from] apiary_policy::ParamError),
    /// The policy refused the cluster or its tenant table.
    #[error("policy {0}")]
    Policy(#[from] apiary_policy::PolicyError),
    /// The service refused to start.
    #[error("the live service refused the setup: {0}")]
    Service(#[from] crate::core::CoreError),
}

/// What a policy with `caps` gives jobs whose effect on their speed the live driver
/// does not model, if it gives any, and what `apiary serve` runs it for: the
/// simulated agents run a job at its GPUs' speed, where the simulator's models slow it
/// by its CPUs, its reads or the service beside it.
pub fn unmodelled(caps: apiary_policy::Capabilities) -> Option<(&'static str, &'static str)> {
    use apiary_policy::Capability as C;
    [
        (
            C::CpuWorkers,
            "CPUs for their input pipelines",
            "jobs submitted with --model",
        ),
        (
            C::Io,
            "cache and remote-storage bandwidth",
            "jobs submitted with --model and --dataset-gb",
        ),
        (
            C::OnlineSharing,
            "SM shares beside online services",
            "jobs beside the services on its online_nodes",
        ),
    ]
    .into_iter()
    .find(|(c, _, _)| caps.has(*c))
    .map(|(_, what, served)| (what, served))
}

/// The service config that serves `policy` (with `params`) on `cluster`: a VC-sharing
/// policy becomes `sharing` hosting its `intra` policy, with the VC table the simulator
/// would compute from `jobs`.
fn service_config(
    cluster: &Cluster,
    jobs: &[Job],
    policy: &str,
    params: &Params,
) -> Result<ServerConfig, LiveSetupError> {
    let mut built = apiary_policy::registry::build(policy, params)?;
    if built.capabilities().has(apiary_policy::Capability::Elastic) {
        return Err(LiveSetupError::Elastic {
            policy: policy.to_string(),
        });
    }
    if let Some((what, served)) = unmodelled(built.capabilities()) {
        return Err(LiveSetupError::Unmodelled {
            policy: policy.to_string(),
            what,
            served,
        });
    }
    let (policy_name, own, sharing, vcs) = match built.tenancy() {
        Some(t) => {
            let sharing = t.sharing().ok_or_else(|| LiveSetupError::Sharing {
                policy: policy.to_string(),
            })?;
            let table = t.plan(cluster, jobs)?;
            let intra = params.text(&apiary_policy::vc::INTRA_PARAM).to_string();
            let own = params
                .0
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("intra.")?.to_string(), v.clone())))
                .collect();
            let vcs = table
                .into_iter()
                .filter(|t| t.nodes > 0 || !sharing.cells())
                .map(|t| VcConfig {
                    name: t.name,
                    quota_gpus: (!sharing.cells()).then_some(t.gpus),
                    nodes: sharing.cells().then_some(t.nodes),
                    run_as: None,
                })
                .collect();
            (intra, own, Some(sharing), vcs)
        }
        None => (policy.to_string(), params.0.clone(), None, Vec::new()),
    };
    let mut nodes = Vec::with_capacity(cluster.nodes.len());
    for n in &cluster.nodes {
        if !(1..=64).contains(&n.gpus) {
            return Err(LiveSetupError::Node {
                cluster: cluster.name.clone(),
                node: n.name.clone(),
                gpus: n.gpus,
            });
        }
        nodes.push(NodeConfig {
            name: n.name.clone(),
            gpus: n.gpus,
            gpu_type: n.gpu_type.clone(),
            cpus: None,
            memory_gib: None,
            gpu_memory_gib: None,
        });
    }
    Ok(ServerConfig {
        listen: "127.0.0.1:0".into(),
        data_dir: ":memory:".into(),
        archive_dir: None,
        store: "redb".into(),
        etcd_endpoints: Vec::new(),
        etcd_prefix: "apiary".into(),
        advertise_url: None,
        leader_lease_s: 15.0,
        policy: policy_name,
        params: own,
        heartbeat_interval_s: 1.0,
        // The simulated agents speak only when a part exits: no node ever times out.
        node_timeout_s: 1e9,
        grace_s: 1.0,
        log_format: "off".into(),
        sharing,
        vcs,
        nodes,
        tokens: Vec::new(),
        tokens_file: None,
        carbon_file: None,
        io: None,
        online_nodes: None,
        share_policy: None,
        share_params: Default::default(),
        max_jobs_per_vc: u64::MAX,
        // The engine reads every finished job's record at the end: none leaves.
        retain_finished_s: 1e9,
        max_records_per_vc: u64::MAX,
        max_record_bytes_per_vc: u64::MAX,
    })
}

/// The live service behind simulated agents, for the engine to drive.
pub struct LiveBackend {
    core: Core,
    trace: Vec<Job>,
    /// Per trace job: its index in the service's world, once the API accepted it.
    index: Vec<Option<JobIdx>>,
}

impl LiveBackend {
    /// The service that would serve `policy` (with `params`) on `cluster`, set up for
    /// the run of `jobs` (sorted by submit time): a VC-sharing policy becomes
    /// `sharing` hosting its `intra` policy, with the VC table the simulator would
    /// compute from `jobs`.
    pub fn new(
        cluster: &Cluster,
        jobs: Vec<Job>,
        policy: &str,
        params: &Params,
        cfg: &Config,
    ) -> Result<LiveBackend, LiveSetupError> {
        let service = service_config(cluster, &jobs, policy, params)?;
        let start = jobs.first().map_or(0, |j| j.submit);
        let mut core = Core::on_cluster(service, cluster.clone(), start)?;
        core.stop_instantly();
        let world = core.world_mut();
        world.seed = cfg.seed;
        world.restart_overhead = cfg.restart_overhead;
        world.carbon = cfg.carbon.clone();
        world.pue = cfg.pue;
        Ok(LiveBackend {
            core,
            index: vec![None; jobs.len()],
            trace: jobs,
        })
    }

    /// The service's state machine.
    pub fn core(&self) -> &Core {
        &self.core
    }
}

impl Backend for LiveBackend {
    fn world(&self) -> &World {
        self.core.world()
    }
    fn world_mut(&mut self) -> &mut World {
        self.core.world_mut()
    }
    fn trace(&self) -> &[Job] {
        &self.trace
    }
    fn take_trace(&mut self) -> Vec<Job> {
        std::mem::take(&mut self.trace)
    }
    fn index(&self, k: usize) -> Option<JobIdx> {
        self.index.get(k).copied().flatten()
    }
    fn arrive(&mut self, k: usize, now: Time, _pass: &mut Pass) -> Result<JobIdx, Box<str>> {
        match self.core.submit(spec_of(&self.trace[k]), now) {
            Ok(_) => {
                let j = self.core.world().jobs.len() as JobIdx - 1;
                self.index[k] = Some(j);
                Ok(j)
            }
            Err(e) => Err(e.message.into_boxed_str()),
        }
    }
    fn complete(&mut self, j: JobIdx, now: Time, _pass: &mut Pass) {
        exit_parts(&mut self.core, j, now);
    }
    /// Only adaptive jobs end outside a completion, and jobs submitted through the API
    /// are never adaptive: nothing to tell.
    fn ended(&mut self, _j: JobIdx, _pass: &mut Pass) {}
    fn schedule(&mut self, now: Time, pass: &mut Pass) -> Result<(), PolicyError> {
        // The service refuses a pass's undeclared mechanism itself (and logs it).
        self.core.schedule(now);
        pass.actions.extend_from_slice(self.core.last_actions());
        pass.wake = self.core.wake();
        Ok(())
    }
    fn policy_name(&self) -> &'static str {
        self.core.policy_name()
    }
    fn carries_trace_data(&self) -> bool {
        false
    }
}

/// The API submission of a trace job: its size, tenant, priority, and its duration as
/// the user's estimate (which oracle policies read, as the simulator's do).
fn spec_of(job: &Job) -> JobSpec {
    JobSpec {
        // No name: a trace id may pass the API's length limit, and ids map by order.
        name: None,
        gpus: job.gpus,
        gpu_milli: None,
        cpu_milli: None,
        memory_mib: None,
        gpu_type: None,
        vc: job.vc.as_deref().map(String::from),
        priority: job.priority,
        command: vec!["replay".into()],
        env: BTreeMap::new(),
        workdir: None,
        estimated_duration_s: Some(job.duration as f64 / 1000.0),
        deadline_unix_s: job.deadline.map(|d| d / 1000),
        restart: RestartPolicy {
            on_failure: false,
            on_node_loss: false,
            max_restarts: 0,
            failure_exit_codes: Vec::new(),
        },
        time_limit_s: None,
        after_ok: Vec::new(),
        after_any: Vec::new(),
        array: None,
        checkpoint_dir: None,
        elastic: None,
        adaptive: None,
        model: None,
        dataset_gb: None,
        grace_s: None,
    }
}

/// Each node of running job `j` reports its part exited with 0 at `now`.
fn exit_parts(core: &mut Core, j: JobIdx, now: Time) {
    let id = j as u64 + 1;
    let Ok(rec) = core.job(id) else {
        return;
    };
    let attempt = rec.attempt;
    let nodes: Vec<(String, u32)> = rec
        .parts
        .iter()
        .map(|p| {
            let gpus = core
                .config()
                .nodes
                .iter()
                .find(|n| n.name == p.node)
                .map_or(0, |n| n.gpus);
            (p.node.clone(), gpus)
        })
        .collect();
    for (node, gpus) in nodes {
        let hb = Heartbeat {
            node,
            instance: "simulated".into(),
            succeeds: None,
            replace: false,
            gpus,
            running: Vec::new(),
            exited: vec![Exit {
                job: id,
                attempt,
                code: 0,
                lost: false,
                output_tail: String::new(),
            }],
            shutting_down: false,
            output: Vec::new(),
            hints: Vec::new(),
            online: Vec::new(),
        };
        // Declared nodes with their declared sizes: a heartbeat cannot be refused.
        let _ = core.heartbeat(&hb, now);
    }
}
