//! The archive of finished jobs that left the hot state (see the core's history
//! module): append-only JSON-lines files in `archive_dir` (`data_dir/archive/` unless
//! the config names one), one per UTC day of
//! archiving (`jobs-YYYY-MM-DD.jsonl`), mode 600, each line one record as
//! `GET /v1/jobs/{id}` gives it but lighter: environment values dropped (names kept),
//! the command cut to [`COMMAND_KEPT`] bytes and each output tail to [`TAIL_KEPT`].
//! `apiary jobs -a --since` reads it, as sacct reads Slurm's accounting database; `jq`
//! reads it too. A record is written (and synced) before it leaves the store, so a
//! crash in between leaves it in both: readers keep the last line of each id.
//!
//! With `data_dir = ":memory:"` the archive is in memory (the newest
//! [`MEMORY_KEPT`] records), as the state is.

use crate::core::ended_at;
use crate::types::JobRecord;
use crate::types::JobState;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Bytes of a command kept.
pub const COMMAND_KEPT: usize = 4096;
/// Bytes of each part's output tail kept.
pub const TAIL_KEPT: usize = 1024;
/// Records an in-memory archive keeps.
pub const MEMORY_KEPT: usize = 100_000;

/// Why the archive could not be written or read.
#[derive(Debug, thiserror::Error)]
#[error("archive {}: {source}", path.display())]
pub struct ArchiveError {
    /// The file or directory.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// What an archive query selects.
#[derive(Clone, Debug, Default)]
pub struct ArchiveQuery {
    /// Jobs that ended at or after this, unix ms.
    pub since_ms: u64,
    /// Only this VC's.
    pub vc: Option<String>,
    /// Only these states (none: all).
    pub states: Vec<JobState>,
    /// Only this user's.
    pub user: Option<String>,
    /// Only ids below this.
    pub after: Option<u64>,
    /// Records at most.
    pub limit: usize,
}

/// The archive.
#[derive(Debug)]
pub struct Archive {
    dir: Option<PathBuf>,
    memory: Mutex<Vec<JobRecord>>,
}

fn cut(s: &mut String, keep: usize, from_end: bool) {
    if s.len() <= keep {
        return;
    }
    if from_end {
        let mut at = s.len() - keep;
        while !s.is_char_boundary(at) {
            at += 1;
        }
        s.drain(..at);
    } else {
        let mut at = keep;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
}

/// The record as the archive keeps it.
pub fn trimmed(mut r: JobRecord) -> JobRecord {
    for v in r.spec.env.values_mut() {
        v.clear();
    }
    let mut left = COMMAND_KEPT;
    for a in r.spec.command.iter_mut() {
        cut(a, left, false);
        left -= a.len();
    }
    r.spec.command.retain(|a| !a.is_empty());
    for p in r.parts.iter_mut() {
        cut(&mut p.output_tail, TAIL_KEPT, true);
    }
    r.reason = None;
    r
}

fn day(unix_ms: u64) -> String {
    apiary_model::rfc3339_utc(unix_ms)[..10].to_string()
}

impl Archive {
    /// The archive in `dir`, created if missing (`None`: in memory).
    pub fn open(dir: Option<&Path>) -> Result<Archive, ArchiveError> {
        let dir = match dir {
            Some(d) => {
                use std::os::unix::fs::DirBuilderExt as _;
                let dir = d.to_path_buf();
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir)
                    .map_err(|source| ArchiveError {
                        path: dir.clone(),
                        source,
                    })?;
                Some(dir)
            }
            None => None,
        };
        Ok(Archive {
            dir,
            memory: Mutex::new(Vec::new()),
        })
    }

    /// Appends `records` (trimmed), durably, to the file of `now_ms`'s day.
    pub fn append(&self, records: Vec<JobRecord>, now_ms: u64) -> Result<(), ArchiveError> {
        let Some(dir) = &self.dir else {
            let mut m = self.memory.lock().unwrap_or_else(|e| e.into_inner());
            m.extend(records.into_iter().map(trimmed));
            let over = m.len().saturating_sub(MEMORY_KEPT);
            m.drain(..over);
            return Ok(());
        };
        let path = dir.join(format!("jobs-{}.jsonl", day(now_ms)));
        let err = |source| ArchiveError {
            path: path.clone(),
            source,
        };
        let mut text = Vec::new();
        for r in records {
            serde_json::to_writer(&mut text, &trimmed(r)).map_err(|e| err(e.into()))?;
            text.push(b'\n');
        }
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(err)?;
        f.write_all(&text).map_err(err)?;
        f.sync_data().map_err(err)
    }

    /// Every record archived on or after `since_ms`'s day, the last of each id.
    fn read_since(&self, since_ms: u64) -> Result<BTreeMap<u64, JobRecord>, ArchiveError> {
        let mut out = BTreeMap::new();
        let Some(dir) = &self.dir else {
            let m = self.memory.lock().unwrap_or_else(|e| e.into_inner());
            for r in m.iter() {
                out.insert(r.id, r.clone());
            }
            return Ok(out);
        };
        let from = format!("jobs-{}.jsonl", day(since_ms));
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|source| ArchiveError {
                path: dir.clone(),
                source,
            })?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("jobs-") && n.ends_with(".jsonl") && *n >= *from)
            })
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|source| ArchiveError {
                path: f.clone(),
                source,
            })?;
            // A line cut short by a crash is skipped: its record is still in the store.
            for r in text
                .lines()
                .filter_map(|l| serde_json::from_str::<JobRecord>(l).ok())
            {
                out.insert(r.id, r);
            }
        }
        Ok(out)
    }

    /// One page of archived jobs, newest first, at most `q.limit` and `max_bytes` of
    /// them; and the next page's `after` when more match.
    pub fn query(
        &self,
        q: &ArchiveQuery,
        max_bytes: usize,
    ) -> Result<(Vec<JobRecord>, Option<u64>), ArchiveError> {
        let all = self.read_since(q.since_ms)?;
        let mut out: Vec<JobRecord> = Vec::new();
        let mut bytes = 0;
        let selected = all
            .range(..q.after.unwrap_or(u64::MAX))
            .rev()
            .map(|(_, r)| r)
            .filter(|r| ended_at(r) >= q.since_ms)
            .filter(|r| q.vc.as_deref().is_none_or(|v| r.vc == v))
            .filter(|r| q.user.is_none() || r.user == q.user)
            .filter(|r| q.states.is_empty() || q.states.contains(&r.state));
        for r in selected {
            let size = serde_json::to_vec(r).map_or(0, |b| b.len());
            if out.len() >= q.limit || (!out.is_empty() && bytes + size > max_bytes) {
                let next = out.last().map(|l| l.id);
                return Ok((out, next));
            }
            bytes += size;
            out.push(r.clone());
        }
        Ok((out, None))
    }

    /// Job `id` if archived on or after `since_ms`'s day.
    pub fn find(&self, id: u64, since_ms: u64) -> Result<Option<JobRecord>, ArchiveError> {
        Ok(self.read_since(since_ms)?.remove(&id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{JobSpec, Part, Transition};

    fn record(id: u64, vc: &str, end: u64) -> JobRecord {
        JobRecord {
            schema_version: 1,
            id,
            spec: serde_json::from_value::<JobSpec>(serde_json::json!({
                "gpus": 1, "command": ["x".repeat(10_000)], "env": {"SECRET": "v"}
            }))
            .unwrap(),
            vc: vc.into(),
            user: None,
            array_id: None,
            state: JobState::Succeeded,
            submitted_ms: end - 10,
            attempt: 1,
            parts: vec![Part {
                node: "n0".into(),
                gpus: vec![0],
                gpu_milli: None,
                exit: Some(0),
                output_tail: "y".repeat(5000),
            }],
            history: vec![Transition {
                at_ms: end,
                event: "succeeded".into(),
                detail: String::new(),
            }],
            stopping: Vec::new(),
            hints: None,
            cpus: None,
            power_limit: None,
            io: None,
            sm_share: None,
            reason: None,
        }
    }

    #[test]
    fn archived_records_are_light_paged_and_read_back_by_day() {
        let dir = std::env::temp_dir().join(format!("apiary-archive-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = Archive::open(Some(&dir)).unwrap();
        let day0 = 1_795_000_000_000;
        a.append(vec![record(1, "a", day0), record(2, "b", day0)], day0)
            .unwrap();
        // A crash between archiving and deleting: record 2 again, a day later.
        a.append(
            vec![record(2, "b", day0), record(3, "a", day0 + 86_400_000)],
            day0 + 86_400_000,
        )
        .unwrap();
        let q = ArchiveQuery {
            since_ms: day0 - 1,
            limit: 2,
            ..Default::default()
        };
        let (page, next) = a.query(&q, 1 << 20).unwrap();
        assert_eq!(page.iter().map(|r| r.id).collect::<Vec<_>>(), [3, 2]);
        assert_eq!(next, Some(2));
        let r = &page[1];
        assert_eq!(r.spec.env["SECRET"], "");
        assert_eq!(r.spec.command[0].len(), COMMAND_KEPT);
        assert_eq!(r.parts[0].output_tail.len(), TAIL_KEPT);
        let (rest, next) = a
            .query(
                &ArchiveQuery {
                    after: Some(2),
                    ..q.clone()
                },
                1 << 20,
            )
            .unwrap();
        assert_eq!((rest.len(), rest[0].id, next), (1, 1, None));
        let only_a = ArchiveQuery {
            vc: Some("a".into()),
            since_ms: day0 + 1,
            ..q
        };
        let (page, _) = a.query(&only_a, 1 << 20).unwrap();
        assert_eq!(page.iter().map(|r| r.id).collect::<Vec<_>>(), [3]);
        assert_eq!(a.find(1, day0).unwrap().unwrap().vc, "a");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
