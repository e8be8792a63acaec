//! `plugin`: a policy written in any language, run as a child process that speaks the
//! JSON-lines protocol of [`protocol`] (docs/plugins.md) on its stdin and stdout.
//!
//! This is how researchers used to Blox or a Python simulator try an idea without
//! writing Rust. The process learns jobs as they arrive, finish and come back, and at
//! each pass gets the core view and answers with starts (through a named placement),
//! preemptions and a wake-up time. It acts only through the core contract, so the
//! simulator and the live service host it as they host FIFO. The bridge writes
//! notifications into a buffer and flushes only when it needs an answer, so a pass
//! costs one round trip.

pub mod protocol;

use crate::ctx::Ctx;
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::JobIdx;
use crate::{ParamError, Params, PlacementStrategy, Policy, PolicyError};
use apiary_model::Cluster;
use protocol::{Decide, Hello, OnFail, Running, View};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const CMD: ParamSpec = ParamSpec {
    key: "cmd",
    default: "",
    about: "the plugin's command line, split at spaces (python3 examples/plugins/fifo.py)",
};
const DURATIONS: ParamSpec = ParamSpec {
    key: "durations",
    default: "false",
    about: "send each job's duration (an oracle, as SJF reads it)",
};

/// `plugin`: its spec.
pub const PLUGIN: PolicySpec = PolicySpec {
    name: "plugin",
    about: "a policy in another language: a process speaking JSON lines (docs/plugins.md)",
    capabilities: Capabilities::of(&[Capability::Durations]),
    params: &[CMD, DURATIONS],
    build: |p| Ok(Box::new(Plugin::new(p)?)),
};

/// The bridge to one plugin process.
pub struct Plugin {
    argv: Vec<String>,
    durations: bool,
    /// Whether it reads the running jobs at each pass (its `hello` says).
    reads_running: bool,
    io: Option<Io>,
    /// A failure while notifying (which cannot return one), reported by the next pass.
    failed: Option<String>,
    running: Vec<Running>,
    started: Vec<u32>,
    preempted: Vec<u32>,
}

struct Io {
    child: Child,
    to: BufWriter<ChildStdin>,
    from: BufReader<ChildStdout>,
    line: String,
    /// Lines read so far, for messages.
    lines: u64,
}

impl Plugin {
    /// Reads `cmd` and `durations`; the process starts at [`Policy::attach`].
    pub fn new(p: &Params) -> Result<Plugin, ParamError> {
        let argv: Vec<String> = p.text(&CMD).split_whitespace().map(String::from).collect();
        if argv.is_empty() {
            return Err(ParamError::Bad {
                key: CMD.key.into(),
                value: String::new(),
                message:
                    "give the plugin's command, e.g. plugin:cmd=python3 examples/plugins/fifo.py"
                        .into(),
            });
        }
        Ok(Plugin {
            argv,
            durations: p.bool(&DURATIONS)?,
            reads_running: true,
            io: None,
            failed: None,
            running: Vec::new(),
            started: Vec::new(),
            preempted: Vec::new(),
        })
    }

    fn error(&self, reason: impl Into<String>) -> PolicyError {
        PolicyError::Plugin {
            command: self.argv.join(" "),
            reason: reason.into(),
        }
    }

    /// Runs `f` on the pipe to the plugin, keeping the first failure for the next pass.
    fn notify(&mut self, f: impl FnOnce(&mut BufWriter<ChildStdin>) -> std::io::Result<()>) {
        if self.failed.is_some() {
            return;
        }
        let r = match &mut self.io {
            Some(io) => f(&mut io.to).map_err(|e| format!("writing to it: {e}")),
            None => Err("it was not started (the driver did not attach the policy)".into()),
        };
        if let Err(e) = r {
            self.failed = Some(e);
        }
    }

    /// Flushes what is written and reads one line of JSON as `T`.
    fn answer<T: serde::de::DeserializeOwned>(&mut self, what: &str) -> Result<T, PolicyError> {
        let Some(io) = &mut self.io else {
            return Err(self.error("it was not started"));
        };
        let read = io
            .to
            .flush()
            .map_err(|e| format!("writing to it: {e}"))
            .and_then(|()| {
                io.line.clear();
                io.from
                    .read_line(&mut io.line)
                    .map_err(|e| format!("reading its output: {e}"))
            });
        let n = match read {
            Ok(n) => n,
            Err(e) => return Err(self.error(e)),
        };
        if n == 0 {
            let status = exited(&mut io.child, Duration::from_secs(1));
            let how =
                status.map_or_else(|| "closed its stdout".into(), |s| format!("exited ({s})"));
            return Err(self.error(format!("{how} where its `{what}` was due")));
        }
        io.lines += 1;
        let line = io.lines;
        serde_json::from_str(io.line.trim_end()).map_err(|e| {
            self.error(format!(
                "output line {line}: expected its `{what}` message: {e}"
            ))
        })
    }

    fn start(&mut self, cluster: &Cluster) -> Result<(), PolicyError> {
        let child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| self.error(format!("cannot start it: {e}")))?;
        let mut child = child;
        let (Some(to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(self.error("its pipes were not opened"));
        };
        self.io = Some(Io {
            child,
            to: BufWriter::with_capacity(64 * 1024, to),
            from: BufReader::new(from),
            line: String::new(),
            lines: 0,
        });
        self.notify(|w| protocol::hello(w, cluster));
        if let Some(e) = self.failed.take() {
            return Err(self.error(e));
        }
        let h: Hello = self.answer("hello")?;
        if h.kind != "hello" {
            return Err(self.error(format!("answered `{}` where `hello` was due", h.kind)));
        }
        if h.protocol != protocol::VERSION {
            return Err(self.error(format!(
                "speaks protocol {}; this apiary speaks {}",
                h.protocol,
                protocol::VERSION
            )));
        }
        self.reads_running = h.view.contains(&protocol::Part::Running);
        Ok(())
    }

    /// Carries out a `decide` in order, noting what happened.
    fn act(&mut self, ctx: &mut Ctx<'_>, d: &Decide) -> Result<(), PolicyError> {
        self.started.clear();
        self.preempted.clear();
        let jobs = ctx.job_count();
        for (k, a) in d.actions.iter().enumerate() {
            let idx = match (a.start, a.preempt) {
                (Some(j), None) | (None, Some(j)) => j,
                _ => {
                    return Err(self.error(format!(
                        "decide: actions[{k}] must name exactly one of `start` and `preempt`"
                    )));
                }
            };
            if idx as usize >= jobs {
                return Err(self.error(format!(
                    "decide: actions[{k}] names job {idx}, but only {jobs} jobs have arrived"
                )));
            }
            if a.preempt.is_some() {
                if a.placement.is_some() {
                    return Err(self.error(format!(
                        "decide: actions[{k}] gives a placement to a preemption"
                    )));
                }
                if ctx.preempt(idx as JobIdx) {
                    self.preempted.push(idx);
                }
                continue;
            }
            let how = match a.placement.as_deref() {
                None => PlacementStrategy::Consolidated,
                Some(s) => PlacementStrategy::parse(s).ok_or_else(|| {
                    self.error(format!(
                        "decide: actions[{k}].placement `{s}` is none of {}",
                        PlacementStrategy::NAMES
                    ))
                })?,
            };
            if ctx.start_with(idx as JobIdx, how) {
                self.started.push(idx);
            } else if d.on_fail == OnFail::Stop {
                break;
            }
        }
        if let Some(t) = d.wake_at {
            ctx.wake_at(t);
        }
        Ok(())
    }
}

impl Policy for Plugin {
    fn spec(&self) -> &'static PolicySpec {
        &PLUGIN
    }

    fn capabilities(&self) -> Capabilities {
        if self.durations {
            Capabilities::of(&[Capability::Durations])
        } else {
            Capabilities::CORE
        }
    }

    fn attach(&mut self, cluster: &Cluster) -> Result<(), PolicyError> {
        self.start(cluster)
    }

    fn admit(&mut self, ctx: &Ctx<'_>, job: JobIdx) -> Result<(), PolicyError> {
        let durations = self.durations;
        self.notify(|w| protocol::arrive(w, ctx.now(), job, ctx.job(job), durations));
        Ok(())
    }

    fn on_finish(&mut self, ctx: &Ctx<'_>, job: JobIdx) {
        self.notify(|w| protocol::job_event(w, "finish", ctx.now(), job));
    }

    fn on_requeue(&mut self, ctx: &Ctx<'_>, job: JobIdx) {
        self.notify(|w| protocol::job_event(w, "requeue", ctx.now(), job));
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        if let Some(e) = self.failed.take() {
            return Err(self.error(e));
        }
        let mut running = std::mem::take(&mut self.running);
        running.clear();
        if self.reads_running {
            running.extend(ctx.running().iter().map(|&j| Running {
                idx: j,
                attained: ctx.attained(j),
                executed: ctx.executed(j),
                gpus: ctx.job(j).gpus,
            }));
            // The driver keeps running jobs in no order; the plugin sees them by index.
            running.sort_unstable_by_key(|r| r.idx);
        }
        let view = View {
            now: ctx.now(),
            free_gpus: ctx.free_gpus(),
            total_gpus: ctx.total_gpus(),
            pending: ctx.pending_count(),
            running: self.reads_running.then_some(&running[..]),
        };
        self.notify(|w| protocol::schedule(w, &view));
        self.running = running;
        if let Some(e) = self.failed.take() {
            return Err(self.error(e));
        }
        let d: Decide = self.answer("decide")?;
        if d.kind != "decide" {
            return Err(self.error(format!("answered `{}` where `decide` was due", d.kind)));
        }
        self.act(ctx, &d)?;
        let (started, preempted) = (
            std::mem::take(&mut self.started),
            std::mem::take(&mut self.preempted),
        );
        self.notify(|w| protocol::result(w, &started, &preempted));
        (self.started, self.preempted) = (started, preempted);
        Ok(())
    }
}

impl Drop for Plugin {
    /// Closes the plugin's stdin, which ends its loop, and reaps it; one that does not
    /// exit within a second is killed.
    fn drop(&mut self) {
        let Some(io) = self.io.take() else { return };
        let Io { mut child, to, .. } = io;
        drop(to);
        if exited(&mut child, Duration::from_secs(1)).is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The child's exit status if it exits within `within`.
fn exited(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => return None,
        }
    }
}
