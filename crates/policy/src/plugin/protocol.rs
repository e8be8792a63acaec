//! The plugin protocol, version 1: JSON lines on the plugin's stdin and stdout.
//! docs/plugins.md is its reference; this module is its one definition in code.
//!
//! apiary writes `hello`, then `arrive`, `finish`, `requeue`, `schedule` and `result`
//! lines in time order; the plugin answers `hello` with its own `hello` and each
//! `schedule` with exactly one `decide`, and nothing else. Times are integer
//! milliseconds, jobs are named by `idx` (their index in the run, in arrival order).

use apiary_model::{Cluster, Job, Time};
use serde::Deserialize;
use std::io::{self, Write};

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// Writes `s` as a JSON string.
fn string(w: &mut impl Write, s: &str) -> io::Result<()> {
    serde_json::to_writer(&mut *w, s).map_err(io::Error::from)
}

/// `hello`: the protocol version and the cluster.
pub fn hello(w: &mut impl Write, cluster: &Cluster) -> io::Result<()> {
    write!(
        w,
        r#"{{"type":"hello","protocol":{VERSION},"cluster":{{"name":"#
    )?;
    string(w, &cluster.name)?;
    write!(w, r#","gpus":{},"nodes":["#, cluster.total_gpus)?;
    for (i, n) in cluster.nodes.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        w.write_all(br#"{"name":"#)?;
        string(w, &n.name)?;
        write!(w, r#","switch":{},"gpus":{},"gpu_type":"#, n.switch, n.gpus)?;
        string(w, &n.gpu_type)?;
        w.write_all(b"}")?;
    }
    w.write_all(b"]}}\n")
}

/// `arrive`: a job was submitted; its duration only to a plugin that declared it reads
/// durations.
pub fn arrive(
    w: &mut impl Write,
    now: Time,
    idx: u32,
    job: &Job,
    durations: bool,
) -> io::Result<()> {
    write!(
        w,
        r#"{{"type":"arrive","now":{now},"job":{{"idx":{idx},"id":"#
    )?;
    string(w, &job.id)?;
    write!(
        w,
        r#","submit":{},"gpus":{},"priority":{}"#,
        job.submit, job.gpus, job.priority
    )?;
    if let Some(vc) = &job.vc {
        w.write_all(br#","vc":"#)?;
        string(w, vc)?;
    }
    if let Some(m) = &job.model {
        w.write_all(br#","model":"#)?;
        string(w, m)?;
    }
    if durations {
        write!(w, r#","duration":{}"#, job.duration)?;
    }
    w.write_all(b"}}\n")
}

/// `finish` or `requeue` of one job.
pub fn job_event(w: &mut impl Write, kind: &str, now: Time, idx: u32) -> io::Result<()> {
    writeln!(w, r#"{{"type":"{kind}","now":{now},"idx":{idx}}}"#)
}

/// A running job as `schedule` shows it.
pub struct Running {
    /// Its index.
    pub idx: u32,
    /// GPU-ms of service so far.
    pub attained: u64,
    /// Ms run so far.
    pub executed: Time,
    /// GPUs it holds.
    pub gpus: u32,
}

/// The core view a pass decides on.
pub struct View<'a> {
    /// Now.
    pub now: Time,
    /// Free GPUs.
    pub free_gpus: u64,
    /// All GPUs.
    pub total_gpus: u64,
    /// Pending jobs.
    pub pending: usize,
    /// Running jobs, if the plugin reads them.
    pub running: Option<&'a [Running]>,
}

/// `schedule`: decide now.
pub fn schedule(w: &mut impl Write, v: &View<'_>) -> io::Result<()> {
    write!(
        w,
        r#"{{"type":"schedule","now":{},"free_gpus":{},"total_gpus":{},"pending":{}"#,
        v.now, v.free_gpus, v.total_gpus, v.pending
    )?;
    let Some(running) = v.running else {
        return w.write_all(b"}\n");
    };
    w.write_all(br#","running":["#)?;
    for (i, r) in running.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        write!(
            w,
            r#"{{"idx":{},"gpus":{},"attained":{},"executed":{}}}"#,
            r.idx, r.gpus, r.attained, r.executed
        )?;
    }
    w.write_all(b"]}\n")
}

/// `result`: what the last `decide` did.
pub fn result(w: &mut impl Write, started: &[u32], preempted: &[u32]) -> io::Result<()> {
    w.write_all(br#"{"type":"result","started":["#)?;
    list(w, started)?;
    w.write_all(br#"],"preempted":["#)?;
    list(w, preempted)?;
    w.write_all(b"]}\n")
}

fn list(w: &mut impl Write, v: &[u32]) -> io::Result<()> {
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        write!(w, "{x}")?;
    }
    Ok(())
}

/// The plugin's `hello`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// Must be `hello`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The version it speaks.
    pub protocol: u32,
    /// Its name, for messages.
    #[serde(default)]
    pub name: Option<String>,
    /// The optional parts of `schedule` it reads: `running` (every running job with
    /// its service so far), the default. A plugin that keeps its own account (FIFO)
    /// says `[]` and spares each pass the list.
    #[serde(default = "all_parts")]
    pub view: Vec<Part>,
}

/// An optional part of the `schedule` view.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// The running jobs.
    Running,
}

fn all_parts() -> Vec<Part> {
    vec![Part::Running]
}

/// What to do when a start finds no GPUs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnFail {
    /// Do no later action of this decision (a queue without backfill).
    #[default]
    Stop,
    /// Go on with the next action (backfill).
    Continue,
}

/// One action of a `decide`: exactly one of `start` and `preempt`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionMsg {
    /// Start this pending job.
    #[serde(default)]
    pub start: Option<u32>,
    /// Preempt this running job.
    #[serde(default)]
    pub preempt: Option<u32>,
    /// Where a start goes: a placement strategy's name (`consolidated` if absent).
    #[serde(default)]
    pub placement: Option<String>,
}

/// The plugin's answer to `schedule`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decide {
    /// Must be `decide`.
    #[serde(rename = "type")]
    pub kind: String,
    /// In order.
    #[serde(default)]
    pub actions: Vec<ActionMsg>,
    /// After a start that finds no GPUs.
    #[serde(default)]
    pub on_fail: OnFail,
    /// Call `schedule` again at this time even if nothing happens (ms).
    #[serde(default)]
    pub wake_at: Option<Time>,
}
