//! Bounded history. Finished jobs leave the hot state (memory and the store) once they
//! have been finished for `retain_finished_s`, or earlier, oldest first, when their VC
//! holds more than `max_records_per_vc` records or `max_record_bytes_per_vc` bytes of
//! them: every record a tenant owns counts, finished ones included, so no tenant grows
//! the server by submitting and cancelling. What leaves goes to the archive (see
//! [`crate::archive`]), which `apiary jobs -a --since` still reads; the caller writes
//! it there before it deletes the records from the store.
//!
//! A job that left keeps a small tombstone in the job table (the world's per-job
//! tables are indexed by position), and its end state in [`Core`]'s `ended` map, so
//! that a later `--dependency` on it is still answered.

use super::{ApiError, Core};
use crate::types::{JobRecord, JobSpec, JobState};
use apiary_policy::JobIdx;
use std::collections::VecDeque;

/// Ended jobs whose state is remembered after they left the hot state.
pub(super) const ENDED_KEPT: usize = 100_000;

/// One VC's records in the hot state.
#[derive(Debug, Default)]
pub(super) struct VcRecords {
    /// Records, unfinished ones included.
    pub count: u64,
    /// Their approximate bytes (JSON).
    pub bytes: u64,
    /// Finished records in the order they finished: (end, unix ms; job).
    finished: VecDeque<(u64, JobIdx)>,
}

/// About the JSON size of a record, without writing it.
pub(super) fn record_bytes(r: &JobRecord) -> u64 {
    let s = &r.spec;
    let spec = s.command.iter().map(|a| a.len() + 3).sum::<usize>()
        + s.env
            .iter()
            .map(|(k, v)| k.len() + v.len() + 6)
            .sum::<usize>()
        + s.name.as_ref().map_or(0, String::len)
        + s.workdir.as_ref().map_or(0, String::len)
        + 8 * (s.after_ok.len() + s.after_any.len());
    let parts = r
        .parts
        .iter()
        .map(|p| p.node.len() + p.output_tail.len() + 4 * p.gpus.len() + 48)
        .sum::<usize>();
    let history = r
        .history
        .iter()
        .map(|t| t.event.len() + t.detail.len() + 48)
        .sum::<usize>();
    (spec + parts + history + 400) as u64
}

/// When a finished record ended: its last transition.
pub(crate) fn ended_at(r: &JobRecord) -> u64 {
    r.history.last().map_or(r.submitted_ms, |t| t.at_ms)
}

impl Core {
    /// Counts a record entering the hot state.
    pub(super) fn track_added(&mut self, j: JobIdx) {
        let r = &self.jobs[j as usize];
        let b = record_bytes(r);
        let v = self.records.entry(r.vc.clone()).or_default();
        v.count += 1;
        v.bytes += b;
        if self.hot_bytes.len() <= j as usize {
            self.hot_bytes.resize(j as usize + 1, 0);
        }
        self.hot_bytes[j as usize] = b.min(u32::MAX as u64) as u32;
    }

    /// Forgets a record that was never accepted (the policy refused it).
    pub(super) fn untrack(&mut self, j: JobIdx) {
        let r = &self.jobs[j as usize];
        if let Some(v) = self.records.get_mut(&r.vc) {
            v.count = v.count.saturating_sub(1);
            v.bytes = v.bytes.saturating_sub(self.hot_bytes[j as usize] as u64);
        }
        self.hot_bytes[j as usize] = 0;
    }

    /// Notes records that finished (once each), with their final size.
    pub(super) fn track_finished(&mut self, js: &[JobIdx]) {
        for &j in js {
            let r = &self.jobs[j as usize];
            // A tombstone left the hot state already.
            if !r.state.terminal()
                || self.finished_seen.contains(&j)
                || !self.by_id.contains_key(&r.id)
            {
                continue;
            }
            let b = record_bytes(r);
            let end = ended_at(r);
            let v = self.records.entry(r.vc.clone()).or_default();
            v.bytes = (v.bytes + b).saturating_sub(self.hot_bytes[j as usize] as u64);
            self.hot_bytes[j as usize] = b.min(u32::MAX as u64) as u32;
            let q = &mut v.finished;
            // Mostly in order; a recovered record may end earlier than one queued.
            let at = q.partition_point(|&(e, _)| e <= end);
            q.insert(at, (end, j));
            self.finished_seen.insert(j);
        }
    }

    /// Makes room for one more record of `vc`: moves its oldest finished records out
    /// while it is at a limit, and refuses when only unfinished ones are left.
    pub(super) fn room_for(&mut self, vc: &str, bytes: u64) -> Result<(), ApiError> {
        let (max_n, max_b) = (
            self.cfg.max_records_per_vc,
            self.cfg.max_record_bytes_per_vc,
        );
        loop {
            let Some((count, held)) = self.records.get(vc).map(|v| (v.count, v.bytes)) else {
                return Ok(());
            };
            if count < max_n && held.saturating_add(bytes) <= max_b {
                return Ok(());
            }
            if !self.evict_oldest(vc, u64::MAX) {
                return Err(ApiError::too_many(
                    "vc",
                    format!(
                        "VC {vc} holds {} records ({} bytes) and none of them has finished \
                         with its processes gone: its limits are max_records_per_vc = {max_n} and \
                         max_record_bytes_per_vc = {max_b}",
                        count, held
                    ),
                ));
            }
        }
    }

    /// Moves out every finished record past its retention, and those over a VC's
    /// limits. Whether any moved.
    pub fn expire(&mut self, now: u64) -> bool {
        let retain = (self.cfg.retain_finished_s * 1000.0) as u64;
        let vcs: Vec<String> = self.records.keys().cloned().collect();
        let mut moved = false;
        for vc in vcs {
            loop {
                let v = &self.records[&vc];
                let over = v.count > self.cfg.max_records_per_vc
                    || v.bytes > self.cfg.max_record_bytes_per_vc;
                // Over a limit, the oldest goes whenever it ended; else only past its
                // retention.
                let ended_by = if over {
                    u64::MAX
                } else {
                    now.saturating_sub(retain)
                };
                if !self.evict_oldest(&vc, ended_by) {
                    break;
                }
                moved = true;
            }
        }
        moved
    }

    /// Moves `vc`'s oldest finished record that ended by `ended_by` (unix ms) and whose
    /// processes are all gone out of the hot state into the archive queue. False when it
    /// has none.
    fn evict_oldest(&mut self, vc: &str, ended_by: u64) -> bool {
        let Some(v) = self.records.get(vc) else {
            return false;
        };
        // A record whose processes are still stopping stays (its GPUs are held in its
        // name); those behind it may go.
        let stopping = |j: JobIdx| {
            let id = self.jobs[j as usize].id;
            self.stopping
                .range((id, 0, 0)..=(id, u32::MAX, u32::MAX))
                .next()
                .is_some()
        };
        let Some(at) = v
            .finished
            .iter()
            .take_while(|&&(end, _)| end <= ended_by)
            .position(|&(_, j)| !stopping(j))
        else {
            return false;
        };
        let Some(v) = self.records.get_mut(vc) else {
            return false;
        };
        let Some((_, j)) = v.finished.remove(at) else {
            return false;
        };
        let id = self.jobs[j as usize].id;
        v.count = v.count.saturating_sub(1);
        v.bytes = v.bytes.saturating_sub(self.hot_bytes[j as usize] as u64);
        self.hot_bytes[j as usize] = 0;
        self.finished_seen.remove(&j);
        let cur = &self.jobs[j as usize];
        // What stays: enough for the world's tables to name a finished job.
        let tomb = JobRecord {
            schema_version: cur.schema_version,
            id,
            vc: cur.vc.clone(),
            user: cur.user.clone(),
            array_id: cur.array_id,
            state: cur.state,
            submitted_ms: cur.submitted_ms,
            attempt: cur.attempt,
            spec: JobSpec {
                name: None,
                gpus: cur.spec.gpus,
                gpu_milli: cur.spec.gpu_milli,
                cpu_milli: None,
                memory_mib: None,
                gpu_type: None,
                vc: None,
                priority: 0,
                command: Vec::new(),
                env: Default::default(),
                workdir: None,
                estimated_duration_s: None,
                deadline_unix_s: None,
                restart: Default::default(),
                time_limit_s: None,
                after_ok: Vec::new(),
                after_any: Vec::new(),
                array: None,
                checkpoint_dir: None,
                elastic: None,
                adaptive: None,
                model: None,
                dataset_gb: None,
                grace_s: None,
            },
            parts: Vec::new(),
            history: Vec::new(),
            stopping: Vec::new(),
            hints: None,
            cpus: None,
            power_limit: None,
            io: None,
            sm_share: None,
            reason: None,
        };
        let full = std::mem::replace(&mut self.jobs[j as usize], tomb);
        self.by_id.remove(&id);
        self.dirty.remove(&j);
        self.held.remove(&j);
        self.live.retain(|(job, _), _| *job != id);
        self.ended.insert(id, (full.state, full.vc.clone()));
        if self.ended.len() > ENDED_KEPT {
            self.ended.pop_first();
        }
        self.to_archive.push(full);
        true
    }

    /// The state of job `id`, in the hot state or ended and archived, and its VC.
    pub(super) fn state_of(&self, id: u64) -> Option<(JobState, &str)> {
        match self.by_id.get(&id) {
            Some(&j) => Some((
                self.jobs[j as usize].state,
                self.jobs[j as usize].vc.as_str(),
            )),
            None => self.ended.get(&id).map(|(s, vc)| (*s, vc.as_str())),
        }
    }
}
