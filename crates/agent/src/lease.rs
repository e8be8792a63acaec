//! Self-fencing. The server may run a node's jobs elsewhere once it has heard nothing
//! from the node for `node_timeout_s + grace_s`. Each job's supervisor therefore holds
//! a lease that the agent renews whenever the server hears it: if no renewal comes
//! within `node_timeout_s` of the last heartbeat the server took (the agent is stopped,
//! hung, or cut off from the server), the supervisor stops the job (SIGTERM, then
//! SIGKILL after the grace period) before the server may start it again elsewhere. The
//! lease is [`LEASE_SHARE`] of the node timeout, for margin.
//!
//! A heartbeat whose connection the server's host refused renews the lease too:
//! nothing listens there, so no server runs that could give the jobs away, and a server
//! restart or outage, however long, kills no job (a restarted server gives every node
//! the full timeout afresh). A timeout or any other failure does not renew it.

use std::io::Write as _;

/// The lease is this share of the server's node timeout, counted from the send of the
/// last heartbeat the server took: a margin for the supervisors' 50 ms polling and for
/// the time a heartbeat takes to reach the server.
pub const LEASE_SHARE: f64 = 0.9;
use std::process::ChildStdin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The agent's side: when the server last heard it, and for how long that holds.
#[derive(Debug, Default)]
pub struct Lease {
    from: Option<Instant>,
    ttl: Duration,
}

impl Lease {
    /// The server took a heartbeat sent at `sent` (or could not be running then).
    pub fn renew(&mut self, sent: Instant, ttl: Duration) {
        if self.from.is_none_or(|f| sent > f) {
            self.from = Some(sent);
        }
        self.ttl = ttl;
    }

    /// The heartbeat sent at `sent` could not have reached a running server (its host
    /// refused the connection): the lease runs on from then, once it was granted.
    pub fn heard(&mut self, sent: Instant) {
        if self.from.is_some() {
            self.renew(sent, self.ttl);
        }
    }

    /// Time left; `None` before the server was first heard (no job runs then).
    pub fn left(&self) -> Option<Duration> {
        let from = self.from?;
        Some(self.ttl.saturating_sub(from.elapsed()))
    }

    /// The lease ran out: the supervisors are stopping their jobs.
    pub fn expired(&self) -> bool {
        self.left().is_some_and(|l| l.is_zero())
    }
}

/// Tells one supervisor how long its lease has left. A supervisor that is gone or
/// does not read is skipped: the write never blocks the agent.
pub fn tell(to: &mut ChildStdin, left: Duration) -> bool {
    let line = format!("L {}\n", left.as_millis());
    // A write of fewer than PIPE_BUF bytes to a pipe is whole or refused.
    match to.write(line.as_bytes()) {
        Ok(n) => n == line.len(),
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    }
}

/// Makes a supervisor's lease pipe non-blocking.
pub fn nonblocking(to: &ChildStdin) {
    let _ = rustix::io::ioctl_fionbio(to, true);
}

/// The supervisor's side: a deadline that renewals on stdin push back.
#[derive(Clone, Debug)]
pub struct Deadline {
    base: Instant,
    at_ms: Arc<AtomicU64>,
}

impl Deadline {
    /// A deadline `first` from now, pushed back by each `L <ms>` line read from stdin
    /// (by a thread of its own, until stdin closes).
    pub fn from_stdin(first: Duration) -> Deadline {
        let d = Deadline {
            base: Instant::now(),
            at_ms: Arc::new(AtomicU64::new(first.as_millis() as u64)),
        };
        let at = d.clone();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if let Some(ms) = line.strip_prefix("L ").and_then(|m| m.parse::<u64>().ok()) {
                    at.set(Duration::from_millis(ms));
                }
            }
        });
        d
    }

    /// Sets the deadline `left` from now.
    pub fn set(&self, left: Duration) {
        let now = self.base.elapsed().as_millis() as u64;
        self.at_ms
            .store(now + left.as_millis() as u64, Ordering::SeqCst);
    }

    /// Whether it passed.
    pub fn passed(&self) -> bool {
        self.base.elapsed().as_millis() as u64 >= self.at_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_runs_from_the_heartbeat_sent_last_and_expires() {
        let mut l = Lease::default();
        assert_eq!(l.left(), None);
        assert!(!l.expired());
        let t0 = Instant::now();
        l.renew(t0, Duration::from_millis(30));
        assert!(l.left().unwrap() <= Duration::from_millis(30));
        // An older send does not move it back.
        l.renew(t0 - Duration::from_secs(1), Duration::from_millis(30));
        assert!(!l.expired());
        std::thread::sleep(Duration::from_millis(40));
        assert!(l.expired());
        let d = Deadline {
            base: Instant::now(),
            at_ms: Arc::new(AtomicU64::new(0)),
        };
        assert!(d.passed());
        d.set(Duration::from_secs(60));
        assert!(!d.passed());
    }
}
