//! The wire and record shapes of the live API: what clients submit, what the server
//! stores and returns, and the agent protocol. Stored records carry a `schema_version`.
//!
//! It is a crate of its own, on serde alone, so that the clients and the node agent
//! speak the API without the server's runtime, HTTP stack and store.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the stored records' shape.
pub const SCHEMA_VERSION: u32 = 1;

/// What to do when a job's attempt ends badly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartPolicy {
    /// Run again after a non-zero exit.
    #[serde(default)]
    pub on_failure: bool,
    /// Run again when a node of the job is lost (missed heartbeats).
    #[serde(default = "yes")]
    pub on_node_loss: bool,
    /// Attempts after the first, at most.
    #[serde(default = "three")]
    pub max_restarts: u32,
    /// Exit codes that mean the infrastructure failed, not the job (an NCCL watchdog's
    /// abort, say): such an attempt is a failure, requeued as after a lost node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_exit_codes: Vec<i32>,
}

fn yes() -> bool {
    true
}
fn three() -> u32 {
    3
}

impl Default for RestartPolicy {
    fn default() -> RestartPolicy {
        RestartPolicy {
            on_failure: false,
            on_node_loss: true,
            max_restarts: 3,
            failure_exit_codes: Vec::new(),
        }
    }
}

/// A job as submitted (`POST /v1/jobs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// A name for people; defaults to the command's first word.
    #[serde(default)]
    pub name: Option<String>,
    /// GPUs, all at once.
    pub gpus: u32,
    /// Thousandths of one GPU (1..=999) for a job that shares a GPU with others; `gpus`
    /// is then 1. The server packs such jobs onto GPUs it holds for sharing, and the
    /// agent passes the share to the process (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u32>,
    /// CPU thousandths of a core a GPU-sharing job needs on its node (only with
    /// `gpu_milli`; checked against the node's `cpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_milli: Option<u64>,
    /// Memory a GPU-sharing job needs on its node, MiB (only with `gpu_milli`; checked
    /// against the node's `memory_gib`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// Required GPU model, if any.
    #[serde(default)]
    pub gpu_type: Option<String>,
    /// Virtual cluster (tenant); `default` when absent.
    #[serde(default)]
    pub vc: Option<String>,
    /// Larger is more important.
    #[serde(default)]
    pub priority: i32,
    /// Program and arguments, run without a shell on every node of the placement.
    pub command: Vec<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory on the node.
    #[serde(default)]
    pub workdir: Option<String>,
    /// The user's estimate of the run time, seconds (SJF orders by it).
    #[serde(default)]
    pub estimated_duration_s: Option<f64>,
    /// When the job should be done, unix seconds (kept for deadline-aware policies).
    #[serde(default)]
    pub deadline_unix_s: Option<u64>,
    /// Restarts.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// Longest an attempt may run, seconds (sbatch's `--time`): past it the attempt is
    /// stopped and the job fails with a `timeout` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<f64>,
    /// Jobs that must succeed before this one starts (sbatch's
    /// `--dependency=afterok:ID:ID`); if one of them fails or is cancelled, this job is
    /// cancelled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_ok: Vec<u64>,
    /// Jobs that must have ended, however, before this one starts (sbatch's
    /// `--dependency=afterany:ID`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_any: Vec<u64>,
    /// Seconds between SIGTERM and SIGKILL when an attempt is stopped (preempted,
    /// cancelled, drained), for the job to save a checkpoint (the server's `grace_s`
    /// when absent; at most an hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_s: Option<f64>,
    /// Where the job keeps its checkpoints, on the nodes: each attempt gets it as
    /// `APIARY_CHECKPOINT_DIR`, beside `APIARY_RESTART_COUNT`, to resume from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_dir: Option<String>,
    /// The task of a job array (sbatch's `--array`) this job is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayTask>,
    /// Resizable by checkpoint and restart between these GPU counts: an elastic policy
    /// picks its size, and `gpus` is the size the others run it at (and the one its
    /// `estimated_duration_s` is for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<Elastic>,
    /// An adaptive job (AdaptDL's, under Pollux): it tunes its own batch within these
    /// limits and reports its goodput model by writing AdaptDL's scheduling hints to
    /// `$APIARY_HINTS`; the policy sizes it by checkpoint and restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveBatch>,
    /// The model the job trains, as Synergy's CPU measurements name it (`res18`,
    /// `res50`, `transformer`, ...): a policy that sizes input pipelines (`goldminer`)
    /// gives the job CPUs for its data workers along that model's speed curve, and
    /// GreenFlow's power limits read Zeus's measurements for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The size of the dataset the job reads, GB: a policy that allocates cache and
    /// remote-storage bandwidth (`silod`) sizes its cache share by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_gb: Option<f64>,
}

/// An adaptive job's batch limits (`apiary submit --adaptive`), as AdaptDL's
/// `AdaptiveDataLoader` declares them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveBatch {
    /// The batch it starts with (AdaptDL's `initBatchSize`).
    pub init_batch_size: u32,
    /// The largest total batch (`maxBatchSize`).
    pub max_batch_size: u32,
    /// The smallest and largest per-GPU batch (`localBszBounds`).
    pub local_bsz_bounds: (u32, u32),
}

/// AdaptDL's scheduling hints, the JSON its `post_sched_hints` sends, which a job
/// writes to `$APIARY_HINTS` and its agent forwards. Keys AdaptDL may add are
/// ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedHints {
    /// Must match the submission's `init_batch_size` where given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_batch_size: Option<u32>,
    /// Must match the submission's `max_batch_size` where given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch_size: Option<u32>,
    /// Must match the submission's `local_bsz_bounds` where given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_bsz_bounds: Option<(u32, u32)>,
    /// The batch it uses now (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_batch_size: Option<u32>,
    /// The most replicas it has measured its step time on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_profiled_replicas: Option<u32>,
    /// Whether it accumulates gradients (informational: Pollux's goodput model lets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_accumulation: Option<bool>,
    /// Gradient statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_params: Option<HintGradParams>,
    /// The fitted step-time model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf_params: Option<HintPerfParams>,
}

/// AdaptDL's `gradParams`: the squared norm of the gradient and its variance (null
/// before the job has measured them).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HintGradParams {
    /// Squared norm.
    pub norm: Option<f64>,
    /// Variance.
    pub var: Option<f64>,
}

/// AdaptDL's `perfParams`: its step-time model (`adaptdl.speedup.Params`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct HintPerfParams {
    pub alpha_c: f64,
    pub beta_c: f64,
    pub alpha_n: f64,
    pub beta_n: f64,
    pub alpha_r: f64,
    pub beta_r: f64,
    pub gamma: f64,
}

/// The scheduling hints an attempt's process wrote, forwarded by its agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HintsReport {
    /// Job id.
    pub job: u64,
    /// Attempt number.
    pub attempt: u32,
    /// The file's text (at most [`HINTS_BYTES`]).
    pub text: String,
}

/// Most bytes of a hints file the agent forwards.
pub const HINTS_BYTES: usize = 16 << 10;

/// How an elastic job may be sized (`apiary submit --elastic MIN-MAX`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Elastic {
    /// Fewest GPUs it runs on (a power of two).
    pub min_gpus: u32,
    /// Most GPUs it can use (a power of two).
    pub max_gpus: u32,
    /// Its throughput at each power-of-two count from `min_gpus` to `max_gpus`, as
    /// `[gpus, rate]` pairs in any unit (iterations per second, samples per second);
    /// empty: linear in the GPU count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throughput: Vec<(u32, f64)>,
}

/// A job's place in a job array. The array's id is its first task's job id, as in
/// Slurm (task `12_0` is job 12, and `scancel 12` cancels the whole array).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrayTask {
    /// Its index.
    pub task: u64,
    /// The array's id; absent on the first task, whose own id it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of: Option<u64>,
}

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for GPUs.
    Queued,
    /// Assigned GPUs; its agents run it.
    Running,
    /// Every process exited 0.
    Succeeded,
    /// It failed and will not run again.
    Failed,
    /// Cancelled by a user.
    Cancelled,
}

impl JobState {
    /// Whether the job is over.
    pub fn terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
}

/// One entry of a job's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// Unix time, ms.
    pub at_ms: u64,
    /// What happened: `queued`, `running`, `preempted`, `requeued`, `succeeded`,
    /// `failed`, `cancelled`.
    pub event: String,
    /// Why, or where.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// The GPUs of one node that an attempt uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// Node name.
    pub node: String,
    /// GPU indices on the node.
    pub gpus: Vec<u32>,
    /// The thousandths of each of those GPUs it holds, when it shares them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u32>,
    /// Exit code once this part's process ended (`-1`: killed by a signal or lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    /// The end of its output (stdout and stderr), as its agent reported it on exit.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_tail: String,
}

/// Longest output tail an agent sends and the server keeps per part, bytes.
pub const OUTPUT_TAIL_BYTES: usize = 16 << 10;

/// Size limits of a submission's fields (a larger field gets a 413 naming it), so that
/// no tenant can grow the store, the server's memory or the dashboard without bound.
pub mod limits {
    /// `name`, bytes.
    pub const NAME_BYTES: usize = 256;
    /// `vc` and `gpu_type`, bytes.
    pub const LABEL_BYTES: usize = 64;
    /// Arguments in `command`.
    pub const COMMAND_ARGS: usize = 4096;
    /// `command`, all arguments together, bytes.
    pub const COMMAND_BYTES: usize = 128 << 10;
    /// Variables in `env`.
    pub const ENV_VARS: usize = 1024;
    /// `env`, keys and values together, bytes.
    pub const ENV_BYTES: usize = 128 << 10;
    /// `workdir`, bytes.
    pub const WORKDIR_BYTES: usize = 4096;
}

/// How `GET /v1/jobs` pages: newest first, at most [`LIST_MAX`] records and
/// [`LIST_BYTES`] bytes of them per reply; when more match, the reply's
/// [`NEXT_PAGE_HEADER`] names the `after` of the next page.
pub mod paging {
    /// Records per reply, at most (and by default).
    pub const LIST_MAX: usize = 1000;
    /// Bytes of records per reply, at most (one record is always sent).
    pub const LIST_BYTES: usize = 4 << 20;
    /// The reply header that names the next page's `after` (ids below it).
    pub const NEXT_PAGE_HEADER: &str = "x-apiary-next-after";
}

/// A job as stored and returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Record shape version.
    pub schema_version: u32,
    /// Server-assigned id.
    pub id: u64,
    /// As submitted.
    pub spec: JobSpec,
    /// Its VC.
    pub vc: String,
    /// Who submitted it: the `user` of the token it came with, if that names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The id of the job array it is a task of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_id: Option<u64>,
    /// Current state.
    pub state: JobState,
    /// Submission time, unix ms.
    pub submitted_ms: u64,
    /// Attempts started so far (the current one when running).
    pub attempt: u32,
    /// The current (or last) attempt's GPUs.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Everything that happened, oldest first.
    pub history: Vec<Transition>,
    /// Processes of earlier attempts asked to stop and not yet confirmed ended: their
    /// GPUs stay held and the job does not start again until they are gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stopping: Vec<StoppingPart>,
    /// An adaptive job's latest scheduling hints that the server took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<SchedHints>,
    /// CPUs for its input pipeline that a `cpu-workers` policy (GoldMiner) gives the
    /// running attempt, over all its nodes (each node's agent pins its part to its
    /// GPUs' share of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// The power limit a `power-limits` policy (GreenFlow with `power_limits`) gives the
    /// running attempt's GPUs, as a fraction of their top limit; each node's agent sets
    /// it with `nvidia-smi -pl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit: Option<f64>,
    /// The cache and remote-storage bandwidth an `io` policy (SiloD) gives the running
    /// attempt, over all its nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoShare>,
    /// The SM share an `online-sharing` policy (MuxFlow) gives the running attempt
    /// beside online services, the least over its GPUs that serve one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_share: Option<f64>,
    /// Why a queued job waits (squeue's REASON): `QuotaExceeded`, `Priority`,
    /// `Cordoned`, `GpuType` or `Resources`. Computed when the record is read, never
    /// stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A process asked to stop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoppingPart {
    /// Its attempt.
    pub attempt: u32,
    /// Node name.
    pub node: String,
    /// GPU indices it holds.
    pub gpus: Vec<u32>,
}

/// A node's administrative and observed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeHealth {
    /// No agent heard from since the server started.
    Unknown,
    /// Heartbeats arrive.
    Up,
    /// Heartbeats stopped.
    Down,
}

/// A node as returned by `GET /v1/nodes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// Name.
    pub name: String,
    /// GPUs.
    pub gpus: u32,
    /// GPU model.
    pub gpu_type: String,
    /// Observed health.
    pub health: NodeHealth,
    /// No new jobs (set by an admin).
    pub cordoned: bool,
    /// GPUs free for new jobs.
    pub free_gpus: u32,
    /// Jobs with a part here.
    pub jobs: Vec<u64>,
    /// The GPUs that jobs share, with each job's thousandths (GPUs in index order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<GpuShares>,
    /// What the online services on its GPUs use, as its agent last measured (nodes
    /// that serve them, under an `online-sharing` policy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceLoad>,
    /// Last heartbeat, unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_ms: Option<u64>,
}

/// One shared GPU of a node: who holds what of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuShares {
    /// GPU index on the node.
    pub gpu: u32,
    /// Thousandths held, all holders together (at most 1000).
    pub used_milli: u32,
    /// The holders, by job id: processes of earlier attempts still stopping too.
    pub holders: Vec<ShareHolder>,
}

/// A process holding part of a shared GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareHolder {
    /// Job id.
    pub job: u64,
    /// Its attempt.
    pub attempt: u32,
    /// Thousandths of the GPU.
    pub milli: u32,
}

/// An attempt's identity on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttemptRef {
    /// Job id.
    pub job: u64,
    /// Attempt number.
    pub attempt: u32,
}

/// A finished process, reported by its agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// Job id.
    pub job: u64,
    /// Attempt number.
    pub attempt: u32,
    /// Exit code, `-1` when killed by a signal.
    pub code: i32,
    /// The agent killed it because it lost contact with the server (not the job's
    /// fault: the job is retried as after a lost node).
    #[serde(default)]
    pub lost: bool,
    /// The last [`OUTPUT_TAIL_BYTES`] of its output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_tail: String,
}

/// `POST /v1/agents/heartbeat`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// The node this agent runs on (a node of the server's config).
    pub node: String,
    /// This agent process's identity, fresh at each start (`PID@HOST/RANDOM`). The
    /// server takes a node's heartbeats from one instance at a time: a second agent
    /// claiming a node is refused (409), and one that was replaced is fenced (409).
    pub instance: String,
    /// The instance this one succeeds on the same state directory, whose jobs it has
    /// ended: it takes the node over without `replace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeds: Option<String>,
    /// Take the node over from the instance serving it now, which is fenced: its next
    /// heartbeat is refused and it kills its jobs (`apiary agent --replace`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
    /// GPUs it found or declares.
    pub gpus: u32,
    /// Processes it runs now.
    #[serde(default)]
    pub running: Vec<AttemptRef>,
    /// Processes that ended since the server last acknowledged them.
    #[serde(default)]
    pub exited: Vec<Exit>,
    /// The agent is stopping (SIGTERM): its jobs were stopped and are in `exited`; the
    /// node takes no new jobs until its agent heartbeats again without this.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shutting_down: bool,
    /// New output of its processes since the server last took it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<OutputChunk>,
    /// Scheduling hints its adaptive jobs wrote since it last sent them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<HintsReport>,
    /// What the online services on its GPUs used, measured since the server asked
    /// (`measure_online`): one entry per GPU it could read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub online: Vec<ServiceLoad>,
}

/// What the processes on one GPU that are not apiary's (an online service) used.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceLoad {
    /// GPU index on the node.
    pub gpu: u32,
    /// Their SM share (0 to 1), at its most over the last minute.
    pub sm: f64,
    /// Their share (0 to 1) of the GPU's memory, now.
    pub memory: f64,
}

/// Output an attempt's process wrote since the agent last sent it: bytes `offset` to
/// `offset + raw_len` of its output file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputChunk {
    /// Job id.
    pub job: u64,
    /// Attempt number.
    pub attempt: u32,
    /// Where in the output file it starts, bytes.
    pub offset: u64,
    /// Its length in the file, bytes (the text may differ where bytes were not UTF-8).
    pub raw_len: u64,
    /// The text.
    pub data: String,
    /// The process has ended and this is the end of its output.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eof: bool,
}

/// Most bytes of one chunk, and of all chunks in one heartbeat.
pub const OUTPUT_CHUNK_BYTES: usize = 16 << 10;
/// Most bytes of output in one heartbeat.
pub const OUTPUT_HEARTBEAT_BYTES: usize = 64 << 10;
/// Most bytes of a running part's output the server keeps for `logs -f`.
pub const OUTPUT_LIVE_BYTES: usize = 64 << 10;

/// The output of one part of a job's current attempt, as `GET /v1/jobs/{id}/output`
/// gives it: the last [`OUTPUT_LIVE_BYTES`] the server holds, from position `start` of
/// the stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartOutput {
    /// Node name.
    pub node: String,
    /// Attempt number.
    pub attempt: u32,
    /// Position of `data`'s first byte in the part's output text.
    pub start: u64,
    /// The text held.
    pub data: String,
    /// The process ended and all of its output is here.
    pub eof: bool,
}

/// What the agent must do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// Attempts to start here.
    pub start: Vec<Launch>,
    /// Attempts to stop (SIGTERM, then SIGKILL after the grace period).
    pub stop: Vec<AttemptRef>,
    /// Exits the server has recorded (forget them).
    pub acked: Vec<AttemptRef>,
    /// Seconds until the next heartbeat.
    pub interval_s: f64,
    /// Seconds of grace between SIGTERM and SIGKILL.
    pub grace_s: f64,
    /// Seconds without a heartbeat after which the server declares the node down and,
    /// a grace period later, runs its jobs elsewhere: the agent stops its processes
    /// before that.
    pub node_timeout_s: f64,
    /// The CPUs for input pipelines that a `cpu-workers` policy gives each attempt the
    /// node runs (or starts now): the agent pins each to that many of its CPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<CpuShare>,
    /// The power limits a `power-limits` policy gives the attempts the node runs (or
    /// starts now): the agent sets each one's GPUs to it, and GPUs no attempt caps back
    /// to their default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power: Vec<PowerCap>,
    /// The cache and bandwidth an `io` policy gives the attempts the node runs (or
    /// starts now): the agent hands each to its attempt in the file `APIARY_IO` names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub io: Vec<IoGrant>,
    /// The node's GPUs serve online services beside apiary's jobs (`online_nodes`
    /// under an `online-sharing` policy): the agent measures what they use and reports
    /// it with its heartbeats.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub measure_online: bool,
    /// The SM share an `online-sharing` policy (MuxFlow) gives each attempt the node
    /// runs beside an online service: the agent starts it with MPS's active-thread
    /// percentage at that share and hands it the share as it changes
    /// (`APIARY_SM_SHARE`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sm: Vec<SmShare>,
}

/// An attempt's SM share beside an online service.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SmShare {
    /// Job id.
    pub job: u64,
    /// Attempt number.
    pub attempt: u32,
    /// Its share of the SMs (0 to 1), the least over its GPUs that serve.
    pub share: f64,
    /// The share of GPU memory the services leave it (0 to 1), the least over its GPUs
    /// that serve: MuxFlow's memory quota.
    pub memory: f64,
}

/// Cache and remote-storage bandwidth for a job's reads.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct IoShare {
    /// Bytes of its dataset to keep cached (SiloD's uniform cache: a fixed subset).
    pub cache_bytes: f64,
    /// Bytes per second it may read from remote storage.
    pub remote_bytes_per_s: f64,
}

/// An attempt's cache and bandwidth on one node.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct IoGrant {
    /// Job id.
    pub job: u64,
    /// Attempt number.
    pub attempt: u32,
    /// Its node's part of the job's share.
    pub share: IoShare,
}

/// An attempt's GPU power limit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerCap {
    /// Job id.
    pub job: u64,
    /// Attempt number.
    pub attempt: u32,
    /// Its GPUs' limit, a fraction (0.3 to 1) of their top limit (`power.max_limit`).
    pub fraction: f64,
}

/// An attempt's CPUs on one node, for its input pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuShare {
    /// Job id.
    pub job: u64,
    /// Attempt number.
    pub attempt: u32,
    /// CPUs, fractional as the policy gives them; the agent pins the attempt to this
    /// many rounded up (at least one, at most the node's).
    pub cpus: f64,
}

/// One process to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// Job id.
    pub job: u64,
    /// Attempt number.
    pub attempt: u32,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Environment, including `APIARY_*` variables; the agent adds
    /// `CUDA_VISIBLE_DEVICES` and, for a share of a GPU, the MPS variables.
    pub env: BTreeMap<String, String>,
    /// Working directory.
    #[serde(default)]
    pub workdir: Option<String>,
    /// GPU indices on this node.
    pub gpus: Vec<u32>,
    /// The thousandths of the GPU the process may use, when it shares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u32>,
    /// Its own milliseconds between SIGTERM and SIGKILL, where the job declared them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
    /// The GPU memory it may pin, MiB, when it shares a GPU of a node whose
    /// `gpu_memory_gib` the server knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_mib: Option<u64>,
    /// The job's VC.
    #[serde(default)]
    pub vc: String,
    /// The local account the VC's jobs run as (`run_as` in the server's `[[vcs]]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
    /// An adaptive job: the agent gives it a file to write its scheduling hints to
    /// (`APIARY_HINTS`) and forwards what it writes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hints: bool,
}

/// `GET /v1/cluster`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// Policy name.
    pub policy: String,
    /// Its parameters.
    pub params: BTreeMap<String, String>,
    /// GPUs in the cluster.
    pub gpus_total: u64,
    /// GPUs held by running jobs.
    pub gpus_allocated: u64,
    /// Jobs by state.
    pub jobs: BTreeMap<String, u64>,
    /// Nodes by health.
    pub nodes: BTreeMap<String, u64>,
}
