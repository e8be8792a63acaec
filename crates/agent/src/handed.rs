//! Shares a policy gives a running attempt that the job itself keeps to, handed over in
//! a file of its own: cache and remote-storage bandwidth (SiloD's `io`: `APIARY_IO`,
//! `{"cache_bytes": C, "remote_bytes_per_s": B}`) and the SM share beside an online
//! service (MuxFlow's `online-sharing`: `APIARY_SM_SHARE`, `{"sm_share": S,
//! "memory_share": M}`, M the GPU memory the service leaves it). The
//! file is rewritten whenever the share changes; each version replaces it whole (a new
//! file renamed over the old), so a reader never sees half of one.
//!
//! The agent hands these shares over and does not police them: remote storage is read
//! over the network, where no per-process limit applies, and MPS fixes a process's SM
//! share when it starts (the agent starts it at its first share).

use apiary_api::{AttemptRef, IoShare};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `APIARY_IO`'s text for `share`.
pub fn io_text(share: &IoShare) -> String {
    format!(
        "{{\"cache_bytes\": {:.0}, \"remote_bytes_per_s\": {:.0}}}\n",
        share.cache_bytes.max(0.0),
        share.remote_bytes_per_s.max(0.0)
    )
}

/// `APIARY_SM_SHARE`'s text for an SM share and a memory share.
pub fn sm_text(share: f64, memory: f64) -> String {
    format!(
        "{{\"sm_share\": {:.4}, \"memory_share\": {:.4}}}\n",
        share.clamp(0.0, 1.0),
        memory.clamp(0.0, 1.0)
    )
}

/// One kind of handed share: what each attempt's file says.
pub struct Handed {
    /// The files' extension.
    ext: &'static str,
    /// The server's latest texts.
    latest: BTreeMap<AttemptRef, String>,
    /// What each file was last written with.
    written: BTreeMap<AttemptRef, String>,
}

impl Handed {
    /// Files named `{job}-{attempt}.{ext}`.
    pub fn new(ext: &'static str) -> Handed {
        Handed {
            ext,
            latest: BTreeMap::new(),
            written: BTreeMap::new(),
        }
    }

    /// The file attempt `(job, attempt)` reads its share from.
    pub fn path(&self, logs: &Path, job: u64, attempt: u32) -> PathBuf {
        logs.join(format!("{job}-{attempt}.{}", self.ext))
    }

    /// Takes a reply's shares as texts, which name every attempt the node runs that
    /// has one.
    pub fn take(&mut self, texts: impl IntoIterator<Item = (AttemptRef, String)>) {
        self.latest = texts.into_iter().collect();
    }

    /// Attempt `a`'s text, to write before it starts.
    pub fn of(&self, a: &AttemptRef) -> Option<&str> {
        self.latest.get(a).map(String::as_str)
    }

    /// Records that `a`'s file was written with `text` as it started.
    pub fn started(&mut self, a: AttemptRef, text: String) {
        self.written.insert(a, text);
    }

    /// Rewrites the file of every running attempt whose share changed; forgets
    /// attempts no longer running. Returns what could not be written, to log.
    pub fn apply(&mut self, logs: &Path, running: impl Fn(&AttemptRef) -> bool) -> Vec<String> {
        self.written.retain(|a, _| running(a));
        let mut failed = Vec::new();
        for (a, text) in &self.latest {
            let Some(old) = self.written.get(a) else {
                continue; // started without a share: it was told of no file
            };
            if old == text {
                continue;
            }
            match replace(&self.path(logs, a.job, a.attempt), text) {
                Ok(()) => {
                    self.written.insert(*a, text.clone());
                }
                Err(e) => failed.push(format!(
                    "job {} attempt {}: writing its {} share: {e}",
                    a.job, a.attempt, self.ext
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
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    let tmp = PathBuf::from(tmp);
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
        let mut s = Handed::new("io");
        s.take([(a, io_text(&share(1e9, 2e6)))]);
        assert_eq!(s.of(&a), Some(io_text(&share(1e9, 2e6)).as_str()));
        // As the agent starts it: the file with its first share.
        let p = s.path(&dir, 4, 2);
        assert!(p.ends_with("4-2.io"));
        std::fs::write(&p, io_text(&share(1e9, 2e6))).unwrap();
        s.started(a, io_text(&share(1e9, 2e6)));
        assert!(s.apply(&dir, |_| true).is_empty());
        s.take([(a, io_text(&share(1e9, 5e5)))]);
        assert!(s.apply(&dir, |_| true).is_empty());
        let got = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            got,
            "{\"cache_bytes\": 1000000000, \"remote_bytes_per_s\": 500000}\n"
        );
        let v: serde_json::Value = serde_json::from_str(&got).unwrap();
        assert_eq!(v["remote_bytes_per_s"], 500000);
        // Ended: forgotten, and its file no longer written.
        s.take([(a, io_text(&share(2e9, 5e5)))]);
        assert!(s.apply(&dir, |_| false).is_empty());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), got);
        assert_eq!(
            sm_text(0.55, 0.7),
            "{\"sm_share\": 0.5500, \"memory_share\": 0.7000}\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
