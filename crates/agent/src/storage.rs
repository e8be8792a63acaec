//! Cache and remote-storage bandwidth for a job's reads: each attempt an `io` policy
//! (SiloD) gives a share gets it in a file of its own, `APIARY_IO`, as JSON
//! (`{"cache_bytes": C, "remote_bytes_per_s": B}`), rewritten whenever the share
//! changes. The job's data loader, or the cache it reads through, keeps to it: the
//! agent hands the share over and does not police reads (remote storage is reached
//! over the network, where no per-process limit applies). Each version replaces the
//! file whole (a new file renamed over the old), so a reader never sees half of one.

use apiary_api::{AttemptRef, IoGrant, IoShare};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file attempt `(job, attempt)` reads its share from.
pub fn path(logs: &Path, job: u64, attempt: u32) -> PathBuf {
    logs.join(format!("{job}-{attempt}.io"))
}

/// The file's text for `share`.
pub fn text(share: &IoShare) -> String {
    format!(
        "{{\"cache_bytes\": {:.0}, \"remote_bytes_per_s\": {:.0}}}\n",
        share.cache_bytes.max(0.0),
        share.remote_bytes_per_s.max(0.0)
    )
}

/// What each attempt's file says now.
#[derive(Default)]
pub struct Shares {
    /// The server's latest shares.
    latest: BTreeMap<AttemptRef, IoShare>,
    /// What each file was last written with.
    written: BTreeMap<AttemptRef, IoShare>,
}

impl Shares {
    /// Takes a reply's shares, which name every attempt the node runs that has one.
    pub fn take(&mut self, grants: &[IoGrant]) {
        self.latest = grants
            .iter()
            .map(|g| {
                let a = AttemptRef {
                    job: g.job,
                    attempt: g.attempt,
                };
                (a, g.share)
            })
            .collect();
    }

    /// Attempt `a`'s share, to write before it starts.
    pub fn of(&self, a: &AttemptRef) -> Option<IoShare> {
        self.latest.get(a).copied()
    }

    /// Records that `a`'s file was written with `share` as it started.
    pub fn started(&mut self, a: AttemptRef, share: IoShare) {
        self.written.insert(a, share);
    }

    /// Rewrites the file of every running attempt whose share changed; forgets
    /// attempts no longer running. Returns what could not be written, to log.
    pub fn apply(&mut self, logs: &Path, running: impl Fn(&AttemptRef) -> bool) -> Vec<String> {
        self.written.retain(|a, _| running(a));
        let mut failed = Vec::new();
        for (a, share) in &self.latest {
            let Some(old) = self.written.get(a) else {
                continue; // started without a share: it was told of no file
            };
            if old == share {
                continue;
            }
            match replace(&path(logs, a.job, a.attempt), &text(share)) {
                Ok(()) => {
                    self.written.insert(*a, *share);
                }
                Err(e) => failed.push(format!(
                    "job {} attempt {}: writing its IO share: {e}",
                    a.job, a.attempt
                )),
            }
        }
        failed
    }
}

/// Replaces `path`'s text whole, keeping its owner and mode.
fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let meta = std::fs::metadata(path)?;
    let tmp = path.with_extension("io.new");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_share_replaces_the_file_of_a_running_attempt_only() {
        let dir = std::env::temp_dir().join(format!("apiary-io-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = AttemptRef { job: 4, attempt: 2 };
        let share = |c: f64, b: f64| IoShare {
            cache_bytes: c,
            remote_bytes_per_s: b,
        };
        let grant = |c, b| IoGrant {
            job: 4,
            attempt: 2,
            share: share(c, b),
        };
        let mut s = Shares::default();
        s.take(&[grant(1e9, 2e6)]);
        assert_eq!(s.of(&a), Some(share(1e9, 2e6)));
        // As the agent starts it: the file with its first share.
        std::fs::write(path(&dir, 4, 2), text(&share(1e9, 2e6))).unwrap();
        s.started(a, share(1e9, 2e6));
        assert!(s.apply(&dir, |_| true).is_empty());
        s.take(&[grant(1e9, 5e5)]);
        assert!(s.apply(&dir, |_| true).is_empty());
        let got = std::fs::read_to_string(path(&dir, 4, 2)).unwrap();
        assert_eq!(
            got,
            "{\"cache_bytes\": 1000000000, \"remote_bytes_per_s\": 500000}\n"
        );
        let v: serde_json::Value = serde_json::from_str(&got).unwrap();
        assert_eq!(v["remote_bytes_per_s"], 500000);
        // Ended: forgotten, and its file no longer written.
        s.take(&[grant(2e9, 5e5)]);
        assert!(s.apply(&dir, |_| false).is_empty());
        assert_eq!(std::fs::read_to_string(path(&dir, 4, 2)).unwrap(), got);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
