//! The live driver on simulated time: a trace replayed through [`Core`], the service's
//! own state machine, with simulated agents and no sockets or sleeping.
//!
//! Jobs are submitted through the API's checks at their trace times; each simulated
//! agent reports a part's exit when its job's work is done at trace speed, with zero
//! latency (the agents stop preempted processes at once, [`Core::stop_instantly`]).
//! Everything in between is the live code: admission, the policy's pass, attempts,
//! parts and exits. So `apiary simulate --driver live` tests the live path at trace
//! scale, and on a trace where the policy declares no capability that only shapes
//! simulated progress (speed factors, stalls, holds) its jobs.csv equals the
//! simulator's byte for byte.

use crate::config::{NodeConfig, ServerConfig, VcConfig};
use crate::core::Core;
use crate::types::{Exit, Heartbeat, JobSpec, RestartPolicy};
use apiary_model::{Cluster, Job, JobOutcome, RunOutcome, Time, UtilSeries};
use apiary_policy::{Action, JobIdx, Params, Status};
use apiary_sim::EventQueue;
use apiary_sim::observe::{self, Observer};
use std::collections::BTreeMap;

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The jobs were not sorted by submission time.
    #[error("jobs must be sorted by submit time (job {id} comes after a later one)")]
    Unsorted {
        /// The offending job.
        id: String,
    },
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

/// The service config that serves `policy` (with `params`) on `cluster`: a VC-sharing
/// policy becomes `sharing` hosting its `intra` policy, with the VC table the simulator
/// would compute from `jobs`.
fn service_config(
    cluster: &Cluster,
    jobs: &[Job],
    policy: &str,
    params: &Params,
) -> Result<ServerConfig, ReplayError> {
    let mut built = apiary_policy::registry::build(policy, params)?;
    let (policy_name, own, sharing, vcs) = match built.tenancy() {
        Some(t) => {
            let table = t.plan(cluster, jobs)?;
            let intra = params.text(&apiary_policy::vc::INTRA_PARAM).to_string();
            let own = params
                .0
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("intra.")?.to_string(), v.clone())))
                .collect();
            let vcs = table
                .into_iter()
                .filter(|t| t.nodes > 0 || policy == "quota")
                .map(|t| VcConfig {
                    name: t.name,
                    quota_gpus: (policy == "quota").then_some(t.gpus),
                    nodes: (policy != "quota").then_some(t.nodes),
                })
                .collect();
            (intra, own, policy.to_string(), vcs)
        }
        None => (
            policy.to_string(),
            params.0.clone(),
            "none".to_string(),
            Vec::new(),
        ),
    };
    let mut nodes = Vec::with_capacity(cluster.nodes.len());
    for n in &cluster.nodes {
        if !(1..=64).contains(&n.gpus) {
            return Err(ReplayError::Node {
                cluster: cluster.name.clone(),
                node: n.name.clone(),
                gpus: n.gpus,
            });
        }
        nodes.push(NodeConfig {
            name: n.name.clone(),
            gpus: n.gpus,
            gpu_type: n.gpu_type.clone(),
        });
    }
    Ok(ServerConfig {
        listen: "127.0.0.1:0".into(),
        data_dir: ":memory:".into(),
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
        max_jobs_per_vc: u64::MAX,
    })
}

/// A job's work done at trace speed, as scheduled when it last started; stale once
/// the job's generation has moved on.
#[derive(Clone, Copy)]
struct Done {
    job: JobIdx,
    generation: u32,
}

/// Replays `jobs` (sorted by submit time) on `cluster` under `policy` through the live
/// service's [`Core`]. The outcome is the simulator's, job for job, in trace order, and
/// its utilisation series comes from the simulator's own observer.
pub fn run(
    cluster: &Cluster,
    jobs: Vec<Job>,
    policy: &str,
    params: &Params,
    seed: u64,
) -> Result<RunOutcome, ReplayError> {
    if let Some(w) = jobs.windows(2).find(|w| w[1].submit < w[0].submit) {
        return Err(ReplayError::Unsorted {
            id: w[1].id.to_string(),
        });
    }
    let cfg = service_config(cluster, &jobs, policy, params)?;
    let start = jobs.first().map_or(0, |j| j.submit);
    let mut core = Core::on_cluster(cfg, cluster.clone(), start)?;
    core.stop_instantly();
    let total_gpus = cluster.total_gpus;
    let n = jobs.len();
    // Per trace job: its index in the service's world, once submitted.
    let mut live: Vec<Option<JobIdx>> = vec![None; n];
    let mut rejected: Vec<Option<String>> = vec![None; n];
    // Per world job: bumped whenever a scheduled completion becomes stale.
    let mut generation: Vec<u32> = Vec::with_capacity(n);
    let mut queue: EventQueue<Done> = EventQueue::new();
    let mut cursor = 0usize;
    // Jobs submitted through the API carry no throughput tables, so of the standard
    // series only utilisation means anything here.
    let mut observers: Vec<Box<dyn Observer>> = vec![
        Box::new(observe::Utilisation::new(start, total_gpus)),
        Box::new(observe::JobCounts::new(start)),
    ];
    let mut observed = start;
    let (mut events, mut passes) = (0u64, 0u64);
    let mut wake: Option<Time> = None;
    loop {
        let valid = |d: &Done, core: &Core, generation: &[u32]| {
            generation[d.job as usize] == d.generation
                && core.world().rt[d.job as usize].status == Status::Running
        };
        queue.skip(|d| !valid(d, &core, &generation));
        let next = [
            jobs.get(cursor).map(|j| j.submit),
            queue.peek().map(|(t, _)| t),
            wake,
        ];
        let Some(now) = next.into_iter().flatten().min() else {
            break;
        };
        for o in &mut observers {
            o.interval(core.world(), observed, now);
        }
        observed = now;
        let mut dirty = false;
        // Completions first, then arrivals, as in the simulator.
        while let Some((_, d)) = queue.pop_due(now) {
            if !valid(&d, &core, &generation) {
                continue;
            }
            exit_parts(&mut core, d.job, now);
            events += 1;
            dirty = true;
        }
        while cursor < n && jobs[cursor].submit == now {
            let k = cursor;
            cursor += 1;
            events += 1;
            let job = &jobs[k];
            if job.gpus > total_gpus || job.gpus == 0 {
                rejected[k] = Some(format!(
                    "needs {} GPUs; the cluster has {}",
                    job.gpus, total_gpus
                ));
                continue;
            }
            match core.submit(spec_of(job), now) {
                Ok(_) => {
                    let j = core.world().jobs.len() as JobIdx - 1;
                    live[k] = Some(j);
                    generation.push(0);
                    dirty = true;
                }
                Err(e) => rejected[k] = Some(e.message),
            }
        }
        if wake == Some(now) {
            wake = None;
            dirty = true;
        }
        if !dirty {
            continue;
        }
        passes += 1;
        core.schedule(now);
        wake = core.wake();
        for &a in core.last_actions() {
            let j = match a {
                Action::Start(j) | Action::Speed(j) => j,
                Action::Preempt(j) => {
                    generation[j as usize] += 1;
                    continue;
                }
            };
            if core.world().rt[j as usize].status != Status::Running {
                continue;
            }
            generation[j as usize] += 1;
            queue.push(
                core.world().finish_time(j),
                Done {
                    job: j,
                    generation: generation[j as usize],
                },
            );
        }
    }
    let w = core.world();
    let outcome_jobs = jobs
        .iter()
        .enumerate()
        .map(|(k, j)| {
            let rt = live[k].map(|i| &w.rt[i as usize]);
            JobOutcome {
                id: j.id.clone(),
                submit: j.submit,
                gpus: j.gpus,
                duration: j.duration,
                vc: j.vc.clone(),
                first_start: rt.and_then(|r| r.first_start),
                finish: rt.and_then(|r| r.finish),
                preemptions: rt.map_or(0, |r| r.preemptions),
                executed: rt.map_or(0, |r| r.executed),
                gpu_time: rt.map_or(0, |r| r.attained),
                rejected: rejected[k]
                    .clone()
                    .map(String::into_boxed_str)
                    .or_else(|| live[k].and_then(|i| w.declined(i)).map(Box::from)),
                deadline: j.deadline,
                judged: live[k].and_then(|i| w.plan_end(i).judged),
            }
        })
        .collect();
    let mut out = RunOutcome {
        policy: core.policy_name().to_string(),
        params: Vec::new(),
        cluster: cluster.name.clone(),
        total_gpus,
        jobs: outcome_jobs,
        util: UtilSeries::new(start, total_gpus),
        cluster_efficiency: None,
        occupancy: None,
        events,
        passes,
        seed,
    };
    for o in observers {
        o.report(&mut out);
    }
    Ok(out)
}

/// The API submission of a trace job: its size, tenant, priority, and its duration as
/// the user's estimate (which oracle policies read, as the simulator's do).
fn spec_of(job: &Job) -> JobSpec {
    JobSpec {
        // No name: a trace id may pass the API's length limit, and ids map by order.
        name: None,
        gpus: job.gpus,
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
        },
        time_limit_s: None,
        after_ok: Vec::new(),
        after_any: Vec::new(),
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
        };
        // Declared nodes with their declared sizes: a heartbeat cannot be refused.
        let _ = core.heartbeat(&hb, now);
    }
}
