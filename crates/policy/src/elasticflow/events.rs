//! The artifact's `ef_sim_jobs` event list, which `progress=artifact` without admission
//! keeps to decide when decisions happen.

use crate::JobIdx;
use std::collections::{BTreeMap, BTreeSet};

/// The artifact's `ef_sim_jobs` event list, as far as it decides when decisions happen:
/// entries keyed by time (seconds) holding end events and plan changes. A job's end
/// event moves as its plan does; an entry it leaves with no end left is deleted, plan
/// changes and all (`change_job_end_event`), and a plan change joins an entry that stays
/// until its time passes. Arrivals come from the engine.
#[derive(Debug, Default)]
pub(super) struct Events {
    ends: BTreeMap<i64, u32>,
    pub(super) changes: BTreeSet<i64>,
    at: Vec<Option<i64>>,
}

impl Events {
    /// Moves `j`'s end event to `t`.
    pub(super) fn move_end(&mut self, j: JobIdx, t: i64) {
        if self.at.len() <= j as usize {
            self.at.resize(j as usize + 1, None);
        }
        let old = self.at[j as usize].replace(t);
        if old == Some(t) {
            return;
        }
        if let Some(o) = old {
            self.leave(o);
        }
        *self.ends.entry(t).or_default() += 1;
    }

    fn leave(&mut self, o: i64) {
        if let Some(n) = self.ends.get_mut(&o) {
            *n -= 1;
            if *n == 0 {
                self.ends.remove(&o);
                self.changes.remove(&o);
            }
        } else {
            self.changes.remove(&o);
        }
    }

    /// `j` ended: its end event is gone.
    pub(super) fn forget(&mut self, j: JobIdx) {
        if let Some(o) = self.at.get_mut(j as usize).and_then(Option::take) {
            self.leave(o);
        }
    }

    /// Entries up to `now` have been handled.
    pub(super) fn pass(&mut self, now: i64) {
        self.ends = self.ends.split_off(&(now + 1));
        self.changes = self.changes.split_off(&(now + 1));
        for a in self.at.iter_mut() {
            if a.is_some_and(|t| t <= now) {
                *a = None;
            }
        }
    }

    /// The next entry after now.
    pub(super) fn next(&self) -> Option<i64> {
        let e = self.ends.keys().next().copied();
        let c = self.changes.first().copied();
        match (e, c) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
