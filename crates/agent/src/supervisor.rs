//! `apiary job-exec`, the supervisor of one attempt. It leads the attempt's process
//! group, runs the job's command as its child, and is a child subreaper: whatever the
//! job forks stays its descendant, even a process that calls `setsid` and leaves the
//! group, or whose parent exits. So it can end the whole attempt:
//! - when the job's main process exits, whatever it left is killed (as Slurm ends a
//!   step), and the supervisor exits only once no descendant is left;
//! - on SIGTERM (from the agent, to the whole group), it passes SIGTERM on to the
//!   descendants outside the group, and kills every descendant after the grace period;
//! - if the agent that started it dies, or the agent's lease runs out (see
//!   [`crate::lease`]), it does the same by itself.

use crate::AgentError;
use crate::procs::{descendants, signal_each};
use rustix::process::{Signal, WaitOptions};
use std::time::{Duration, Instant};

/// Longest the supervisor waits for killed descendants to go.
const REAP_LIMIT: Duration = Duration::from_secs(10);

/// Kills every descendant and reaps them, until none is left (or [`REAP_LIMIT`]).
/// Only once the main child was reaped: reaping any child before could take it.
fn end_descendants(me: i32) {
    let t0 = Instant::now();
    loop {
        let left = descendants(me);
        while let Ok(Some(_)) = rustix::process::waitpid(None, WaitOptions::NOHANG) {}
        if left.is_empty() || t0.elapsed() >= REAP_LIMIT {
            return;
        }
        signal_each(&left, Signal::KILL);
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `command` as a child in this process's group and exits with its status (128 +
/// the signal when a signal ended it), once no process of the attempt is left.
pub fn job_exec(
    grace: Duration,
    lease: Option<Duration>,
    command: &[String],
) -> Result<i32, AgentError> {
    use std::os::unix::process::ExitStatusExt as _;
    let Some(program) = command.first() else {
        return Err(AgentError::NoCommand);
    };
    let agent = std::os::unix::process::parent_id();
    let me = rustix::process::getpid();
    let pgid = rustix::process::getpgrp().as_raw_nonzero().get();
    // Orphans of the job come to this process rather than to init.
    let _ = rustix::process::set_child_subreaper(Some(me));
    let me = me.as_raw_nonzero().get();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|_| AgentError::Signals("job-exec"))?;
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        // The handler comes first: a stop that arrives as the job starts must not end
        // this process before it can escalate.
        let mut term =
            signal(SignalKind::terminate()).map_err(|_| AgentError::Signals("job-exec"))?;
        let deadline = lease.map(crate::lease::Deadline::from_stdin);
        // What the job writes is its user's alone, unless it says otherwise.
        rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
        let mut child = std::process::Command::new(program)
            .args(&command[1..])
            // Its stdin is the agent's lease pipe, which the job must not read.
            .stdin(std::process::Stdio::null())
            .spawn()
            .map_err(|source| AgentError::Start {
                program: program.clone(),
                source,
            })?;
        let mut term_at: Option<Instant> = None;
        let mut killed = false;
        // A SIGTERM to this process came to the whole group, which must not get it
        // twice: a job's trap would run twice (and save its checkpoint twice).
        let stop = |why: Option<&str>| {
            if let Some(why) = why {
                eprintln!("apiary job-exec: stopping the job: {why}");
                crate::procs::signal_group(pgid, Signal::TERM);
            }
            // Those that left the group (setsid) are told too.
            let outside: Vec<i32> = descendants(me)
                .into_iter()
                .filter(|&p| crate::procs::stat(&p.to_string()).is_some_and(|s| s.pgrp != pgid))
                .collect();
            signal_each(&outside, Signal::TERM);
            Some(Instant::now())
        };
        loop {
            let signalled = tokio::select! {
                _ = term.recv() => true,
                _ = tokio::time::sleep(Duration::from_millis(50)) => false,
            };
            if let Some(st) = child.try_wait().map_err(AgentError::Wait)? {
                // What the job left behind goes with it.
                end_descendants(me);
                return Ok(st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)));
            }
            if term_at.is_none() && signalled {
                term_at = stop(None);
            }
            if term_at.is_none() && std::os::unix::process::parent_id() != agent {
                term_at = stop(Some("its agent is gone"));
            }
            if term_at.is_none() && deadline.as_ref().is_some_and(|d| d.passed()) {
                term_at = stop(Some(
                    "its agent's lease ran out (the agent is stopped, hung or cut off from \
                     the server, which may run the job elsewhere)",
                ));
            }
            if !killed && term_at.is_some_and(|t| t.elapsed() >= grace) {
                signal_each(&descendants(me), Signal::KILL);
                killed = true;
            }
        }
    })
}
