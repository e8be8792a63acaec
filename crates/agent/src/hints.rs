//! Adaptive jobs' scheduling hints. An adaptive job (AdaptDL's, under Pollux) reports
//! its goodput model by writing AdaptDL's hints as JSON to `$APIARY_HINTS`, a file the
//! agent made for the attempt; the agent forwards each new version with its next
//! heartbeat, where the server checks it, as it does everything the agent says of a
//! job, against the node's own attempts.
//!
//! A job that rewrites the file in place may be read half-written: text that is not
//! JSON is sent only once it stayed the same over two reads, so that the server can
//! tell the job what is wrong with it rather than with a torn write.

use apiary_api::{AttemptRef, HINTS_BYTES, HintsReport};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The file an attempt writes its hints to.
pub(crate) fn path(logs: &Path, job: u64, attempt: u32) -> PathBuf {
    logs.join(format!("{job}-{attempt}.hints"))
}

/// A version of a hints file: when it was last written, and its length.
type Stamp = (SystemTime, u64);

/// What the agent last read of each attempt's file.
#[derive(Default)]
pub(crate) struct Hints {
    seen: BTreeMap<AttemptRef, Seen>,
}

#[derive(Clone, Copy)]
struct Seen {
    stamp: Stamp,
    /// Sent to the server (in a heartbeat it took).
    sent: bool,
}

impl Hints {
    /// The reports of the files of `attempts` that changed since they were last sent.
    pub(crate) fn changed(
        &mut self,
        logs: &Path,
        attempts: impl Iterator<Item = AttemptRef>,
    ) -> Vec<HintsReport> {
        let mut out = Vec::new();
        for a in attempts {
            let p = path(logs, a.job, a.attempt);
            let Ok(meta) = std::fs::metadata(&p) else {
                continue;
            };
            let stamp = (
                meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                meta.len(),
            );
            let before = self.seen.get(&a).copied();
            if meta.len() == 0 || before.is_some_and(|s| s.stamp == stamp && s.sent) {
                continue;
            }
            let stable = before.is_some_and(|s| s.stamp == stamp);
            self.seen.insert(a, Seen { stamp, sent: false });
            let text = read_capped(&p);
            if serde_json::from_str::<serde_json::Value>(&text).is_ok() || stable {
                out.push(HintsReport {
                    job: a.job,
                    attempt: a.attempt,
                    text,
                });
            }
        }
        out
    }

    /// The server took these reports.
    pub(crate) fn sent(&mut self, reports: &[HintsReport]) {
        for r in reports {
            let a = AttemptRef {
                job: r.job,
                attempt: r.attempt,
            };
            if let Some(s) = self.seen.get_mut(&a) {
                s.sent = true;
            }
        }
    }

    /// Forgets the attempts that ended.
    pub(crate) fn retain(&mut self, running: impl Fn(&AttemptRef) -> bool) {
        self.seen.retain(|a, _| running(a));
    }
}

/// The file's first [`HINTS_BYTES`], as text (a longer file is sent cut, and the
/// server says it is not JSON).
fn read_capped(p: &Path) -> String {
    use std::io::Read as _;
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(p) {
        let _ = f.take(HINTS_BYTES as u64).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_sent_until_taken_and_torn_text_only_once_it_stays() {
        let dir = std::env::temp_dir().join(format!("apiary-hints-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = AttemptRef { job: 4, attempt: 2 };
        let p = path(&dir, 4, 2);
        let mut h = Hints::default();
        std::fs::write(&p, "").unwrap();
        assert!(
            h.changed(&dir, [a].into_iter()).is_empty(),
            "empty: nothing yet"
        );
        std::fs::write(&p, r#"{"maxProfiledReplicas": 1}"#).unwrap();
        let r = h.changed(&dir, [a].into_iter());
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].text, r#"{"maxProfiledReplicas": 1}"#);
        // Not taken (the heartbeat failed): sent again.
        assert_eq!(h.changed(&dir, [a].into_iter()).len(), 1);
        h.sent(&r);
        assert!(h.changed(&dir, [a].into_iter()).is_empty());
        // Half-written: held back once, sent when it stays so.
        std::fs::write(&p, r#"{"maxProfiledRepl"#).unwrap();
        assert!(h.changed(&dir, [a].into_iter()).is_empty());
        let r = h.changed(&dir, [a].into_iter());
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].text, r#"{"maxProfiledRepl"#);
        h.retain(|_| false);
        assert!(h.seen.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
