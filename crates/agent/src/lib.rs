//! A node's agent (`apiary agent`). It heartbeats, runs the attempts the server assigns
//! (each under `apiary job-exec`, leading its own process group, in a scrubbed
//! environment, as an unprivileged user when told), and reports their exits once every
//! process of the attempt is gone.
//!
//! The rules that keep one job from running twice at once:
//! - an attempt's exit is reported only when no process of its group is left;
//! - an attempt is not started while an earlier attempt of the same job still runs here;
//! - the agent's records of its attempts are durable, and a restarted agent ends what
//!   its previous incarnation left before its first heartbeat;
//! - an agent stopped by SIGTERM or SIGINT stops its jobs first and tells the server;
//! - an agent that dies takes its jobs with it (their supervisors see it go);
//! - the agent keeps its jobs through a server outage, and stops an attempt when the
//!   server's reply says it is no longer assigned here (the server gave it away).

mod accounts;
pub mod cpus;
mod error;
mod given;
pub mod handed;
mod hints;
mod identity;
pub mod lease;
pub mod power;
pub mod procs;
pub mod records;
pub mod services;
mod stream;
pub mod supervisor;

pub use error::AgentError;

use apiary_api::*;
use apiary_client::Client;
use procs::{RunAs, group_alive, signal_group};
use records::{AttemptRecord, Records};
use rustix::process::Signal;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `apiary agent`'s settings.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// Server URL.
    pub server: String,
    /// The token, read from its file.
    pub token: Option<String>,
    /// The node served.
    pub node: String,
    /// GPUs declared (`None`: nvidia-smi's count).
    pub gpus: Option<u32>,
    /// Job output directory.
    pub logs: PathBuf,
    /// The durable records' directory.
    pub state: PathBuf,
    /// The user jobs run as.
    pub run_as: Option<RunAs>,
    /// Variables of the agent's environment passed on to jobs.
    pub pass_env: Vec<String>,
    /// Take the node over from the agent instance serving it now (`--replace`).
    pub replace: bool,
    /// Run jobs as root where neither their VC nor `run_as` names an account.
    pub allow_root_jobs: bool,
    /// `nvidia-smi`, which counts the GPUs and sets their power limits.
    pub nvidia_smi: PathBuf,
}

/// How long after the grace period the agent kills an attempt's group itself: the
/// supervisor kills its descendants at the grace period (those outside the group too),
/// and the agent's SIGKILL to the group, which ends the supervisor, comes only if it
/// did not.
const SUPERVISOR_SLACK: Duration = Duration::from_secs(2);

/// The search path jobs get unless `--pass-env PATH` or the job's `env` gives one.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct Running {
    /// The supervisor; `None` once reaped.
    child: Option<Child>,
    pgid: i32,
    /// The supervisor's exit code, once reaped.
    code: Option<i32>,
    term_at: Option<Instant>,
    killed: bool,
    /// Stopped because the agent stops (not the job's fault).
    lost: bool,
    /// The supervisor's lease pipe; `None` once it stopped reading.
    lease: Option<std::process::ChildStdin>,
    /// The uid and VC it runs as.
    uid: u32,
    vc: String,
    /// SIGTERM to SIGKILL: the job's own, or the server's.
    grace: Duration,
    /// An adaptive job, which writes scheduling hints.
    hints: bool,
    /// Its GPUs here.
    gpus: Vec<u32>,
}

/// GPUs of this machine: `nvidia-smi`'s count when it answers, else none.
fn detect_gpus(smi: &Path) -> Option<u32> {
    let out = Command::new(smi)
        .args(["--query-gpu=index", "--format=csv,noheader"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count() as u32,
    )
}

/// Set when SIGTERM or SIGINT arrives.
fn stop_flag() -> Result<Arc<AtomicBool>, AgentError> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|_| AgentError::Signals("agent"))?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        rt.block_on(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                let _ = ready_tx.send(false);
                return;
            };
            let _ = ready_tx.send(true);
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            set.store(true, Ordering::SeqCst);
        })
    });
    match ready_rx.recv() {
        Ok(true) => Ok(flag),
        _ => Err(AgentError::Signals("agent")),
    }
}

/// Prints one line of the agent's log, stamped with the UTC time (RFC 3339).
macro_rules! log {
    ($($arg:tt)*) => {
        eprintln!(
            "{} apiary agent: {}",
            apiary_core::time::rfc3339_utc(unix_ms()),
            format_args!($($arg)*)
        )
    };
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The server unreachable: said once, then once a minute with how often it failed,
/// rather than at every heartbeat.
#[derive(Default)]
struct Outage {
    since: Option<Instant>,
    said: Option<Instant>,
    failures: u64,
}

impl Outage {
    fn failed(&mut self, e: &apiary_client::ClientError) {
        self.failures += 1;
        let since = *self.since.get_or_insert_with(Instant::now);
        if self
            .said
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
        {
            log!(
                "{e} ({} failed heartbeats in {:.0} s; the jobs keep running)",
                self.failures,
                since.elapsed().as_secs_f64()
            );
            self.said = Some(Instant::now());
        }
    }

    fn over(&mut self) {
        if let Some(since) = self.since.take() {
            log!(
                "the server answers again after {:.1} s ({} failed heartbeats)",
                since.elapsed().as_secs_f64(),
                self.failures
            );
        }
        *self = Outage::default();
    }
}

/// What the agent's loop carries from one heartbeat to the next.
struct State {
    records: Records,
    running: BTreeMap<AttemptRef, Running>,
    /// Exits not yet acknowledged.
    exited: Vec<Exit>,
    interval: Duration,
    grace: Duration,
    streams: stream::Streams,
    hints: hints::Hints,
    /// What policies set for the attempts beyond their GPUs.
    given: given::Given,
    /// The online services beside the jobs, measured once the server asks.
    services: services::Sampler,
    /// The server asked for the services' loads.
    measure_online: bool,
    lease: lease::Lease,
    /// The lease's running out was logged.
    lease_said: bool,
    outage: Outage,
}

impl State {
    /// Applies the server's reply to the heartbeat sent at `sent_at`: renews the lease,
    /// forgets acknowledged exits, stops and starts attempts.
    fn take_reply(
        &mut self,
        reply: HeartbeatReply,
        sent_at: Instant,
        sent_output: &[OutputChunk],
        starting: Option<(&AgentOptions, &Path)>,
    ) -> Result<(), AgentError> {
        self.outage.over();
        self.lease_said = false;
        // 90 % of the node timeout: the supervisors' polling and the server's clock then
        // never bring a rerun before the old copy is dead.
        let ttl = Duration::from_secs_f64(
            (reply.node_timeout_s * lease::LEASE_SHARE).clamp(0.0, 86_400.0),
        );
        self.lease.renew(sent_at, ttl);
        self.streams.sent(sent_output);
        self.interval = Duration::from_secs_f64(reply.interval_s.clamp(0.05, 60.0));
        self.grace = Duration::from_secs_f64(reply.grace_s.clamp(0.0, 3600.0));
        for a in &reply.acked {
            self.records.acked(a.job, a.attempt)?;
        }
        self.exited.retain(|e| {
            !reply.acked.contains(&AttemptRef {
                job: e.job,
                attempt: e.attempt,
            })
        });
        for s in &reply.stop {
            if let Some(r) = self.running.get_mut(s)
                && r.term_at.is_none()
            {
                signal_group(r.pgid, Signal::TERM);
                r.term_at = Some(Instant::now());
            }
        }
        self.given.take(&reply);
        self.measure_online = reply.measure_online;
        if let Some((o, exe)) = starting {
            let l = Launcher {
                o,
                exe,
                grace: self.grace,
                lease: self.lease.left().unwrap_or(ttl),
                passwd: if reply.start.is_empty() {
                    String::new()
                } else {
                    std::fs::read_to_string("/etc/passwd").unwrap_or_default()
                },
            };
            l.start_assigned(
                &reply.start,
                &self.records,
                &mut self.running,
                &mut self.exited,
                &mut self.given,
            )?;
        }
        let live: BTreeMap<AttemptRef, (i32, Vec<u32>)> = self
            .running
            .iter()
            .filter(|(_, r)| r.term_at.is_none())
            .map(|(a, r)| (*a, (r.pgid, r.gpus.clone())))
            .collect();
        let logs = starting.map(|(o, _)| o.logs.as_path());
        for e in self.given.apply(&reply, logs, &live) {
            log!("{e}");
        }
        Ok(())
    }

    /// Tells every supervisor how long its lease has left.
    fn renew_supervisors(&mut self) {
        let Some(left) = self.lease.left() else {
            return;
        };
        for r in self.running.values_mut() {
            if let Some(p) = &mut r.lease
                && !lease::tell(p, left)
            {
                r.lease = None;
            }
        }
    }

    /// Stops every attempt once the lease ran out (their supervisors do too); they are
    /// reported lost when the server hears the agent again.
    fn check_lease(&mut self) {
        if self.lease.expired() && !self.running.is_empty() && !self.lease_said {
            log!(
                "no heartbeat taken by the server within the node timeout: stopping {} jobs, \
                 which the server may run elsewhere",
                self.running.len()
            );
            self.lease_said = true;
            stop_all(&mut self.running);
        }
    }
}

/// Runs the agent until SIGTERM or SIGINT, or until the server fences it.
pub fn agent(o: AgentOptions) -> Result<(), AgentError> {
    let gpus = o
        .gpus
        .or_else(|| detect_gpus(&o.nvidia_smi))
        .ok_or(AgentError::NoGpus)?;
    create_private_dir(&o.logs)?;
    let records = Records::open(&o.state)?;
    let me = identity::Identity::claim(&o.state)?;
    let stop = stop_flag()?;
    let exe = std::env::current_exe().map_err(AgentError::Exe)?;
    let client = Client::new(&o.server, Duration::from_secs(2)).with_token(o.token.clone());
    log!(
        "node {}, {gpus} GPUs, server {}, logs in {}, state in {}, instance {}{}",
        o.node,
        o.server,
        o.logs.display(),
        o.state.display(),
        me.instance,
        o.run_as.as_ref().map_or(String::new(), |u| format!(
            ", jobs as uid {} gid {}",
            u.uid, u.gid
        ))
    );
    let grace = Duration::from_secs(10);
    end_leftovers(&records, &o.logs, grace)?;
    let mut st = State {
        exited: records.exits()?,
        records,
        running: BTreeMap::new(),
        interval: Duration::from_secs(2),
        grace,
        streams: stream::Streams::default(),
        hints: hints::Hints::default(),
        given: given::Given::new(o.nvidia_smi.clone()),
        services: services::Sampler::new(o.nvidia_smi.clone()),
        measure_online: false,
        lease: lease::Lease::default(),
        lease_said: false,
        outage: Outage::default(),
    };
    let mut stopping_since: Option<Instant> = None;
    loop {
        let shutting_down = stop.load(Ordering::SeqCst);
        if shutting_down && stopping_since.is_none() {
            log!("stopping: ending {} jobs first", st.running.len());
            stopping_since = Some(Instant::now());
            stop_all(&mut st.running);
        }
        st.check_lease();
        reap(&mut st.running, &o.logs, &st.records, &mut st.exited)?;
        let output = st
            .streams
            .chunks(&o.logs, st.running.keys().copied(), &st.exited);
        st.hints.retain(|a| st.running.contains_key(a));
        let hints = st.hints.changed(
            &o.logs,
            st.running.iter().filter(|(_, r)| r.hints).map(|(&a, _)| a),
        );
        let online = if st.measure_online {
            let ours = st.running.values().map(|r| r.pgid).collect();
            let (loads, failed) = st.services.report(ours);
            if let Some(e) = failed {
                log!("{e}");
            }
            loads
        } else {
            Vec::new()
        };
        let hb = Heartbeat {
            node: o.node.clone(),
            instance: me.instance.clone(),
            succeeds: me.previous.clone(),
            replace: o.replace,
            gpus,
            running: st.running.keys().copied().collect(),
            exited: st.exited.clone(),
            shutting_down,
            output,
            hints,
            online,
        };
        let sent_at = Instant::now();
        let sent = client.post::<_, HeartbeatReply>("/v1/agents/heartbeat", &hb);
        if let Err(e) = &sent
            && e.status() == Some(409)
        {
            log!("{e}: killing {} jobs and stopping", st.running.len());
            for r in st.running.values() {
                let kill_at = r.grace + SUPERVISOR_SLACK;
                procs::end_group(r.pgid, kill_at, kill_at + Duration::from_secs(30));
            }
            return Err(AgentError::Fenced(e.to_string()));
        }
        if shutting_down && st.running.is_empty() {
            if let Err(e) = &sent {
                log!(
                    "could not tell the server ({e}); the exits stay in {} for the next start",
                    o.state.display()
                );
            }
            for e in st.given.restore() {
                log!("{e}");
            }
            log!("stopped");
            return Ok(());
        }
        match sent {
            Ok(reply) => {
                let starting = (!shutting_down).then_some((&o, exe.as_path()));
                st.hints.sent(&hb.hints);
                st.take_reply(reply, sent_at, &hb.output, starting)?;
            }
            // The jobs keep running through a server outage: nothing is given away
            // while no server runs, and when it does again its reply says what to
            // stop. Cut off from a running server, the lease runs out instead.
            Err(e) => {
                if e.connection_refused() && !st.lease.expired() {
                    st.lease.heard(sent_at);
                }
                st.outage.failed(&e);
            }
        }
        st.renew_supervisors();
        let nap = if shutting_down {
            Duration::from_millis(50)
        } else {
            st.interval.min(Duration::from_millis(500))
        };
        std::thread::sleep(nap);
    }
}

/// Asks every running attempt to stop (SIGTERM; [`reap`] escalates), as not the jobs'
/// fault.
fn stop_all(running: &mut BTreeMap<AttemptRef, Running>) {
    for r in running.values_mut() {
        r.lost = true;
        if r.term_at.is_none() {
            signal_group(r.pgid, Signal::TERM);
            r.term_at = Some(Instant::now());
        }
    }
}

/// Creates the job output directory, which only its owner may list (mode 711: a job's
/// user opens its own output by name). A directory that is there already keeps its
/// mode, since `--logs` may name a shared one; the files are private either way.
fn create_private_dir(dir: &Path) -> Result<(), AgentError> {
    use std::os::unix::fs::DirBuilderExt as _;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(dir)
        .map_err(AgentError::io("creating", dir))
}

/// Ends what a previous incarnation of the agent left, before the server hears from
/// this one, recording each attempt as lost.
fn end_leftovers(records: &Records, logs: &Path, grace: Duration) -> Result<(), AgentError> {
    for a in records.attempts()? {
        let ours =
            procs::stat(&a.pgid.to_string()).is_none_or(|s| s.start == a.start || s.pgrp != a.pgid);
        if ours && group_alive(a.pgid) {
            log!(
                "ending job {} attempt {} (group {}) left by a previous agent",
                a.job,
                a.attempt,
                a.pgid
            );
            procs::end_group(
                a.pgid,
                grace + SUPERVISOR_SLACK,
                grace + Duration::from_secs(30),
            );
        }
        records.exited(&Exit {
            job: a.job,
            attempt: a.attempt,
            code: -1,
            lost: true,
            output_tail: tail(&log_path(logs, a.job, a.attempt)),
        })?;
    }
    Ok(())
}

/// What starting an attempt takes.
struct Launcher<'a> {
    o: &'a AgentOptions,
    exe: &'a Path,
    grace: Duration,
    /// The lease the supervisors start with.
    lease: Duration,
    /// The text of `/etc/passwd`, read once per heartbeat reply.
    passwd: String,
}

impl Launcher<'_> {
    /// Starts the attempts the server assigned here that may start now, recording
    /// each, or its exit when it could not start.
    fn start_assigned(
        &self,
        start: &[Launch],
        records: &Records,
        running: &mut BTreeMap<AttemptRef, Running>,
        exited: &mut Vec<Exit>,
        given: &mut given::Given,
    ) -> Result<(), AgentError> {
        for l in start {
            let key = AttemptRef {
                job: l.job,
                attempt: l.attempt,
            };
            // Never two attempts of one job at once: a later attempt waits until the
            // earlier one's processes are gone (the server sends it again with every
            // reply).
            if running.keys().any(|k| k.job == l.job) {
                continue;
            }
            let account = self.accounts().of(l).and_then(|u| {
                let uid = u.as_ref().map_or(self.agent_uid(), |u| u.uid);
                let others = running.values().map(|r| (r.uid, r.vc.as_str()));
                accounts::check_not_shared(uid, &l.vc, others).map(|()| (u, uid))
            });
            let knobs = given.at_start(&key);
            let launched = account.and_then(|(u, uid)| {
                let files = given.paths(&self.o.logs, l.job, l.attempt);
                Ok((self.launch(l, u.as_ref(), &knobs, files)?, uid))
            });
            match launched {
                Ok((mut child, uid)) => {
                    given.started(key, knobs);
                    let pgid = child.id() as i32;
                    let start = procs::stat(&pgid.to_string()).map_or(0, |s| s.start);
                    records.started(&AttemptRecord {
                        job: l.job,
                        attempt: l.attempt,
                        pgid,
                        start,
                    })?;
                    let lease = child.stdin.take();
                    if let Some(p) = &lease {
                        lease::nonblocking(p);
                    }
                    running.insert(
                        key,
                        Running {
                            child: Some(child),
                            pgid,
                            code: None,
                            term_at: None,
                            killed: false,
                            lost: false,
                            lease,
                            uid,
                            vc: l.vc.clone(),
                            grace: self.grace_of(l),
                            hints: l.hints,
                            gpus: l.gpus.clone(),
                        },
                    );
                }
                Err(e) => {
                    log!("job {} attempt {}: {e}", l.job, l.attempt);
                    let e = Exit {
                        job: l.job,
                        attempt: l.attempt,
                        code: 127,
                        lost: false,
                        output_tail: format!("apiary agent: {e}"),
                    };
                    records.exited(&e)?;
                    exited.push(e);
                }
            }
        }
        Ok(())
    }

    /// The attempt's grace period: the job's own where it declared one.
    fn grace_of(&self, l: &Launch) -> Duration {
        l.grace_ms
            .map_or(self.grace, |g| Duration::from_millis(g.min(3_600_000)))
    }

    fn agent_uid(&self) -> u32 {
        rustix::process::getuid().as_raw()
    }

    fn accounts(&self) -> accounts::Accounts<'_> {
        accounts::Accounts {
            node: &self.o.node,
            fallback: self.o.run_as.as_ref(),
            allow_root: self.o.allow_root_jobs,
            agent_uid: self.agent_uid(),
            passwd: &self.passwd,
        }
    }

    fn launch(
        &self,
        l: &Launch,
        account: Option<&RunAs>,
        knobs: &given::AtStart,
        (io_file, sm_file): (PathBuf, PathBuf),
    ) -> Result<Child, AgentError> {
        let cpus = knobs.cpus.as_deref();
        use std::os::unix::process::CommandExt as _;
        let o = self.o;
        let out = log_path(&o.logs, l.job, l.attempt);
        let f = private_file(&out, account)?;
        let f2 = f.try_clone().map_err(AgentError::io("opening", &out))?;
        let pass: Vec<(String, String)> = o
            .pass_env
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
            .collect();
        let mut cmd = Command::new(self.exe);
        cmd.arg("job-exec")
            .arg("--grace-ms")
            .arg(self.grace_of(l).as_millis().to_string())
            .arg("--lease-ms")
            .arg(self.lease.as_millis().to_string());
        if let Some(c) = cpus {
            // The supervisor pins itself before the job runs, so all of it starts there.
            cmd.arg("--cpus").arg(cpus::list(c));
        }
        cmd.arg("--")
            .args(&l.command)
            .env_clear()
            .envs(job_env(l, account, &pass))
            .stdin(Stdio::piped())
            .stdout(f2)
            .stderr(f)
            // The supervisor leads a new group: the attempt's processes are found and
            // signalled by it, whatever they fork.
            .process_group(0);
        if let Some(u) = account {
            // As root, std also drops the agent's supplementary groups.
            cmd.uid(u.uid).gid(u.gid);
        }
        if let Some(d) = &l.workdir {
            cmd.current_dir(d);
        }
        if let Some(c) = cpus {
            // How many CPUs it starts with (its data loader's workers); they may change
            // as it runs, which `os.sched_getaffinity(0)` reads.
            cmd.env("APIARY_CPUS", c.len().to_string());
        }
        // Shares the job keeps to, in files rewritten as they change.
        for (var, file, text) in [
            ("APIARY_IO", &io_file, knobs.io.as_deref()),
            (
                "APIARY_SM_SHARE",
                &sm_file,
                knobs.sm.as_ref().map(|s| s.1.as_str()),
            ),
        ] {
            if let Some(text) = text {
                let mut f = private_file(file, account)?;
                std::io::Write::write_all(&mut f, text.as_bytes())
                    .map_err(AgentError::io("writing", file))?;
                cmd.env(var, file);
            }
        }
        if let Some((share, _)) = knobs.sm {
            // MPS caps the job's SMs at its share beside the service from its start.
            cmd.env(
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                ((share * 100.0).ceil() as u32).clamp(1, 100).to_string(),
            );
        }
        if l.hints {
            // The job's own file, empty until it writes its first hints.
            let h = hints::path(&o.logs, l.job, l.attempt);
            private_file(&h, account)?;
            cmd.env("APIARY_HINTS", &h);
        }
        cmd.spawn().map_err(|source| AgentError::Start {
            program: l.command.first().cloned().unwrap_or_default(),
            source,
        })
    }
}

/// Reaps supervisors, ends what their groups left, escalates stops past the grace
/// period, and records the exits of attempts whose groups are empty.
fn reap(
    running: &mut BTreeMap<AttemptRef, Running>,
    logs: &Path,
    records: &Records,
    exited: &mut Vec<Exit>,
) -> Result<(), AgentError> {
    let mut done = Vec::new();
    for (a, r) in running.iter_mut() {
        if let Some(c) = &mut r.child
            && let Ok(Some(st)) = c.try_wait()
        {
            r.code = Some(st.code().unwrap_or(-1));
            r.child = None;
        }
        let alive = group_alive(r.pgid);
        if r.code.is_some() && alive && !r.killed {
            // The job's main process ended: what it left behind goes with it.
            signal_group(r.pgid, Signal::KILL);
            r.killed = true;
        } else if let Some(t) = r.term_at
            && t.elapsed() >= r.grace + SUPERVISOR_SLACK
            && !r.killed
        {
            signal_group(r.pgid, Signal::KILL);
            r.killed = true;
        }
        if r.code.is_some() && !alive {
            done.push((*a, r.code.unwrap_or(-1), r.lost));
        }
    }
    for (a, code, lost) in done {
        running.remove(&a);
        let _ = std::fs::remove_file(hints::path(logs, a.job, a.attempt));
        let e = Exit {
            job: a.job,
            attempt: a.attempt,
            code,
            lost,
            output_tail: tail(&log_path(logs, a.job, a.attempt)),
        };
        records.exited(&e)?;
        exited.push(e);
    }
    Ok(())
}

/// Creates a job's output file, mode 600 and owned by the job's user: no other job
/// can read it.
fn private_file(path: &Path, owner: Option<&RunAs>) -> Result<std::fs::File, AgentError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(AgentError::io("creating", path))?;
    if let Some(u) = owner {
        std::os::unix::fs::fchown(&f, Some(u.uid), Some(u.gid))
            .map_err(AgentError::io("handing to the job's user", path))?;
    }
    Ok(f)
}

fn log_path(logs: &Path, job: u64, attempt: u32) -> PathBuf {
    logs.join(format!("{job}-{attempt}.out"))
}

/// The last [`OUTPUT_TAIL_BYTES`] of a file, lossily as UTF-8.
fn tail(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let from = len.saturating_sub(OUTPUT_TAIL_BYTES as u64);
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_err() || f.read_to_end(&mut buf).is_err() {
        return String::new();
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The environment a job gets: nothing of the agent's (its token above all) but the
/// variables the operator passes on, a search path, the user's identity, the job's own
/// `env` with the `APIARY_*` variables, and `CUDA_VISIBLE_DEVICES`.
pub fn job_env(
    l: &Launch,
    run_as: Option<&RunAs>,
    pass: &[(String, String)],
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("PATH".to_string(), DEFAULT_PATH.to_string());
    for (k, v) in pass {
        env.insert(k.clone(), v.clone());
    }
    if let Some(u) = run_as {
        if let Some(n) = &u.name {
            env.insert("USER".into(), n.clone());
            env.insert("LOGNAME".into(), n.clone());
        }
        if let Some(h) = &u.home {
            env.insert("HOME".into(), h.clone());
        }
    }
    env.extend(l.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.insert(
        "CUDA_VISIBLE_DEVICES".into(),
        l.gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
    );
    if let Some(m) = l.gpu_milli {
        // MPS caps a client at this share of the GPU's SMs, and at this much pinned
        // memory on its device 0 (the one GPU it sees). Without the MPS control daemon
        // on the node CUDA ignores both, and the processes time-share the GPU.
        env.insert("APIARY_GPU_MILLI".into(), m.to_string());
        env.insert(
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(),
            m.div_ceil(10).clamp(1, 100).to_string(),
        );
        if let Some(mib) = l.gpu_memory_mib {
            env.insert("APIARY_GPU_MEMORY_MIB".into(), mib.to_string());
            env.insert(
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(),
                format!("0={mib}M"),
            );
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_sees_none_of_the_agents_environment() {
        let l = Launch {
            job: 3,
            attempt: 1,
            command: vec!["env".into()],
            env: [
                ("APIARY_JOB_ID".to_string(), "3".to_string()),
                ("LR".into(), "0.1".into()),
            ]
            .into_iter()
            .collect(),
            workdir: None,
            gpus: vec![0, 2],
            gpu_milli: None,
            grace_ms: None,
            gpu_memory_mib: None,
            vc: "a".into(),
            run_as: None,
            hints: false,
        };
        let user = RunAs {
            uid: 1001,
            gid: 100,
            name: Some("train".into()),
            home: Some("/home/train".into()),
        };
        let env = job_env(&l, Some(&user), &[("NCCL_DEBUG".into(), "INFO".into())]);
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "APIARY_JOB_ID",
                "CUDA_VISIBLE_DEVICES",
                "HOME",
                "LOGNAME",
                "LR",
                "NCCL_DEBUG",
                "PATH",
                "USER"
            ]
        );
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0,2");
        assert_eq!(env["HOME"], "/home/train");
    }

    #[test]
    fn a_share_of_a_gpu_reaches_the_process_as_mps_limits_it_cannot_override() {
        let l = Launch {
            job: 4,
            attempt: 1,
            command: vec!["env".into()],
            env: [(
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_string(),
                "100".to_string(),
            )]
            .into_iter()
            .collect(),
            workdir: None,
            gpus: vec![3],
            gpu_milli: Some(333),
            grace_ms: None,
            gpu_memory_mib: Some(27_279),
            vc: "a".into(),
            run_as: None,
            hints: false,
        };
        let env = job_env(&l, None, &[]);
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "3");
        assert_eq!(env["APIARY_GPU_MILLI"], "333");
        // 333 thousandths: 33.3 % of the SMs, rounded up so a share never gets less.
        assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "34");
        assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=27279M");
        assert_eq!(env["APIARY_GPU_MEMORY_MIB"], "27279");
        let whole = Launch {
            gpu_milli: None,
            grace_ms: None,
            gpu_memory_mib: None,
            env: Default::default(),
            ..l
        };
        let env = job_env(&whole, None, &[]);
        assert!(!env.contains_key("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
        assert!(!env.contains_key("APIARY_GPU_MILLI"));
    }
}
