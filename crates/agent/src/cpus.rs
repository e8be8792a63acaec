//! CPUs for input pipelines: each attempt a `cpu-workers` policy (GoldMiner) gives a
//! share runs pinned to that many of the node's CPUs, rounded up. The server sends the
//! shares of the node's attempts with every reply; an attempt that starts is pinned by
//! its supervisor before the job runs (`apiary job-exec --cpus`), and one whose CPUs
//! change is re-pinned where it runs, every thread of every process, without a
//! restart. A share of zero pins to one CPU; attempts with no share at all (under
//! policies without `cpu-workers`) keep every CPU.
//!
//! The node's CPUs are those the agent may run on. Attempts take them in turn, in
//! (job, attempt) order; shares beyond the node's CPUs wrap around and overlap (the
//! policy's pool is the cluster's, and its greedy sharing never looks at one node).

use crate::procs::descendants;
use apiary_api::{AttemptRef, CpuShare};
use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
use std::collections::BTreeMap;

/// What the agent pins where.
pub struct Pins {
    /// The CPUs the agent may run on, ascending.
    node: Vec<usize>,
    /// The server's latest shares.
    shares: BTreeMap<AttemptRef, f64>,
    /// The CPUs each attempt was pinned to.
    applied: BTreeMap<AttemptRef, Vec<usize>>,
}

impl Default for Pins {
    /// The agent's own CPUs, none pinned yet.
    fn default() -> Pins {
        Pins {
            node: own_cpus(),
            shares: BTreeMap::new(),
            applied: BTreeMap::new(),
        }
    }
}

impl Pins {
    /// Takes the shares of a reply, which name every attempt the node runs that has
    /// one.
    pub fn take(&mut self, shares: &[CpuShare]) {
        self.shares = shares
            .iter()
            .map(|s| {
                let a = AttemptRef {
                    job: s.job,
                    attempt: s.attempt,
                };
                (a, s.cpus)
            })
            .collect();
    }

    /// The CPUs attempt `a` is to run on, if it has a share.
    pub fn planned(&self, a: &AttemptRef) -> Option<Vec<usize>> {
        plan(&self.shares, &self.node).remove(a)
    }

    /// Records that attempt `a` started pinned to `cpus`.
    pub fn started(&mut self, a: AttemptRef, cpus: Vec<usize>) {
        self.applied.insert(a, cpus);
    }

    /// Re-pins every running attempt whose CPUs changed, given its supervisor's pid;
    /// forgets attempts no longer running. Returns what could not be pinned, to log.
    pub fn apply(&mut self, running: &BTreeMap<AttemptRef, i32>) -> Vec<String> {
        let mut failed = Vec::new();
        self.applied.retain(|a, _| running.contains_key(a));
        for (a, cpus) in plan(&self.shares, &self.node) {
            let Some(&root) = running.get(&a) else {
                continue;
            };
            if self.applied.get(&a) == Some(&cpus) {
                continue;
            }
            match pin_tree(root, &cpus) {
                Ok(()) => {
                    self.applied.insert(a, cpus);
                }
                Err(e) => failed.push(format!(
                    "job {} attempt {}: pinning to CPUs {}: {e}",
                    a.job,
                    a.attempt,
                    list(&cpus)
                )),
            }
        }
        failed
    }
}

/// The CPUs of each attempt with a share: `ceil(share)` of `node`'s (at least one, at
/// most all), taken in turn in attempt order and wrapping around.
pub fn plan(
    shares: &BTreeMap<AttemptRef, f64>,
    node: &[usize],
) -> BTreeMap<AttemptRef, Vec<usize>> {
    let n = node.len();
    let mut next = 0;
    let mut out = BTreeMap::new();
    if n == 0 {
        return out;
    }
    for (&a, &share) in shares {
        let want = if share.is_finite() {
            (share - 1e-9).ceil().clamp(1.0, n as f64) as usize
        } else {
            n
        };
        let mut cpus: Vec<usize> = (0..want).map(|k| node[(next + k) % n]).collect();
        cpus.sort_unstable();
        next = (next + want) % n;
        out.insert(a, cpus);
    }
    out
}

/// The CPUs this process may run on, ascending (CPU 0 alone if that cannot be read).
pub fn own_cpus() -> Vec<usize> {
    let Ok(set) = sched_getaffinity(None) else {
        return vec![0];
    };
    (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
}

fn set_of(cpus: &[usize]) -> CpuSet {
    let mut set = CpuSet::new();
    for &c in cpus.iter().filter(|&&c| c < CpuSet::MAX_CPU) {
        set.set(c);
    }
    set
}

/// Pins this process (its calling thread, and so whatever it starts later).
pub fn pin_self(cpus: &[usize]) -> std::io::Result<()> {
    sched_setaffinity(None, &set_of(cpus)).map_err(Into::into)
}

/// Pins every thread of `root` and of its descendants. A thread that ended meanwhile
/// is no error; one that cannot be pinned is.
pub fn pin_tree(root: i32, cpus: &[usize]) -> std::io::Result<()> {
    let set = set_of(cpus);
    for pid in std::iter::once(root).chain(descendants(root)) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            let Some(tid) = rustix::process::Pid::from_raw(tid) else {
                continue;
            };
            match sched_setaffinity(Some(tid), &set) {
                Ok(()) | Err(rustix::io::Errno::SRCH) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// `0,2,3`: a CPU list as `--cpus` and `taskset -c` take it.
pub fn list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Reads a CPU list (`0,2,3`, or ranges `0-3`).
pub fn parse_list(text: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for item in text.split(',') {
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|&c| c < CpuSet::MAX_CPU)
                .ok_or_else(|| format!("'{item}' is not a CPU or a range of CPUs"))
        };
        let (lo, hi) = (num(lo)?, num(hi)?);
        if lo > hi {
            return Err(format!("'{item}' is not a CPU or a range of CPUs"));
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(job: u64) -> AttemptRef {
        AttemptRef { job, attempt: 1 }
    }

    #[test]
    fn attempts_take_cpus_in_turn_rounded_up_and_wrap_past_the_node() {
        let node = [0, 1, 2, 3];
        let shares: BTreeMap<_, _> = [(a(7), 1.5), (a(3), 0.2), (a(9), 2.0)].into();
        let p = plan(&shares, &node);
        // Job 3 first (attempt order): 0.2 -> one CPU; job 7: 1.5 -> two; job 9: two,
        // of which only one is left, so it wraps to CPU 0.
        assert_eq!(p[&a(3)], vec![0]);
        assert_eq!(p[&a(7)], vec![1, 2]);
        assert_eq!(p[&a(9)], vec![0, 3]);
        // More than the node: all of it. Nothing, or not a number: one, and all.
        let shares: BTreeMap<_, _> = [(a(1), 9.0), (a(2), 0.0), (a(4), f64::NAN)].into();
        let p = plan(&shares, &[4, 6]);
        assert_eq!(p[&a(1)], vec![4, 6]);
        assert_eq!(p[&a(2)], vec![4]);
        assert_eq!(p[&a(4)], vec![4, 6]);
        assert!(plan(&shares, &[]).is_empty());
    }

    #[test]
    fn cpu_lists_read_as_taskset_writes_them() {
        assert_eq!(parse_list("0,2-4,3").unwrap(), vec![0, 2, 3, 4]);
        assert_eq!(list(&[0, 2, 3]), "0,2,3");
        assert!(parse_list("3-1").is_err());
        assert!(parse_list("x").unwrap_err().contains("'x'"));
        assert!(parse_list("").is_err());
    }

    #[test]
    fn a_running_process_and_its_threads_are_re_pinned() {
        let cpus = own_cpus();
        let first = vec![cpus[0]];
        // A shell with a child: both are pinned, the child's threads too.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let root = child.id() as i32;
        let t0 = std::time::Instant::now();
        while descendants(root).is_empty() && t0.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        pin_tree(root, &first).unwrap();
        let allowed = |pid: i32| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let line = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .unwrap()
                .to_string();
            parse_list(line.split(':').nth(1).unwrap().trim()).unwrap()
        };
        assert_eq!(allowed(root), first);
        for d in descendants(root) {
            assert_eq!(allowed(d), first);
        }
        pin_tree(root, &cpus).unwrap();
        assert_eq!(allowed(root), cpus);
        crate::procs::signal_each(&descendants(root), rustix::process::Signal::KILL);
        let _ = child.kill();
        let _ = child.wait();
    }
}
