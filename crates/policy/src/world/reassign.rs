//! Elastic policies' one-step moves of many jobs ([`World::reassign`]), in the
//! simulator's form (a running job moves and keeps going) and the live service's (a
//! running job stops, its GPUs held until its processes have ended, and restarts at
//! its new size in a later pass).

use super::{Action, JobIdx, Status, World};
use apiary_model::Placement;

impl World {
    /// Moves elastic jobs to new placements in one step, so that GPUs one job gives up
    /// may go to another: each `(job, placement)` names a running or pending job and
    /// the GPUs it holds from now on, of any count; an empty placement pauses a running
    /// job (pending again, counted as a preemption). A running job keeps its progress.
    /// Returns what changed (a start or new placement, or a pause) for the driver, or
    /// `None` (changing nothing) if a job is neither running nor pending, is named
    /// twice, or the new placements overlap each other or GPUs held by jobs not named.
    ///
    /// With [`World::fence_preemptions`] (the live service) a running job cannot move
    /// in place: it is a gang of processes on the GPUs it started on. A job moved at
    /// its size keeps its GPUs where no job that moves or starts needs them; every
    /// other running job whose placement changes stops instead ([`Action::Preempt`],
    /// its GPUs fenced until its processes have ended), and a pending job starts only
    /// if its new GPUs are free now; the others start in a later pass, once the GPUs
    /// they were given are back. A resize is thus a checkpoint and a restart, as on a
    /// real cluster.
    pub fn reassign(&mut self, changes: &[(JobIdx, Placement)]) -> Option<Vec<Action>> {
        let mut seen = std::collections::BTreeSet::new();
        for (i, p) in changes {
            let st = self.rt[*i as usize].status;
            let blocked = st == Status::Pending && self.is_blocked(*i) && p.gpus() > 0;
            if !matches!(st, Status::Running | Status::Pending)
                || (blocked && !self.fence_preemptions)
                || !seen.insert(*i)
                || self.is_overlay(*i)
                || self.share_group(*i).is_some()
            {
                return None;
            }
        }
        let changed: Vec<usize> = (0..changes.len())
            .filter(|&k| {
                let (i, p) = &changes[k];
                let rt = &self.rt[*i as usize];
                let unchanged = rt.status == Status::Running && rt.placement == *p;
                let still_waiting = rt.status == Status::Pending && p.gpus() == 0;
                !(unchanged || still_waiting)
            })
            .collect();
        if !self.try_moves(changes, &changed) {
            return None;
        }
        if self.fence_preemptions {
            self.restore_moves(changes, &changed, &changed);
            let moved = self.kept_in_place(changes, changed);
            return Some(self.stop_and_start(changes, &moved));
        }
        let mut out = Vec::with_capacity(changed.len());
        for &k in &changed {
            let (i, p) = (changes[k].0, changes[k].1.clone());
            let idx = i as usize;
            match (self.rt[idx].status, p.gpus()) {
                (Status::Running, 0) => {
                    self.remove_running(i);
                    self.enter_pending(i);
                    let rt = &mut self.rt[idx];
                    rt.placement = p;
                    rt.status = Status::Pending;
                    rt.preemptions += 1;
                    rt.generation += 1;
                    out.push(Action::Preempt(i));
                }
                (Status::Running, _) => {
                    let rt = &mut self.rt[idx];
                    rt.placement = p;
                    rt.generation += 1;
                    out.push(Action::Resize(i));
                }
                _ => {
                    self.mark_running(i, p);
                    out.push(Action::Start(i));
                }
            }
        }
        Some(out)
    }

    /// Gives up the changed running jobs' GPUs and takes every changed job's new ones,
    /// all or nothing: false (the GPUs as they were) if the new placements overlap
    /// each other or GPUs held by jobs not named. Runs each moved job's progress up to
    /// now first.
    fn try_moves(&mut self, changes: &[(JobIdx, Placement)], changed: &[usize]) -> bool {
        for &k in changed {
            let i = changes[k].0;
            if self.rt[i as usize].status == Status::Running {
                self.sync(i);
                let p = self.rt[i as usize].placement.clone();
                // Held by a successful allocate, so release cannot fail.
                let _ = self.state.release(&p);
            }
        }
        let mut done = 0;
        let mut ok = true;
        for (n, &k) in changed.iter().enumerate() {
            if self.state.allocate(&changes[k].1).is_err() {
                ok = false;
                break;
            }
            done = n + 1;
        }
        if !ok {
            self.restore_moves(changes, &changed[..done], changed);
        }
        ok
    }

    /// Releases the new placements of `taken` and takes the running jobs of `changed`
    /// back onto their old GPUs (with `taken` = `changed`, undoes a successful
    /// [`World::try_moves`]).
    fn restore_moves(
        &mut self,
        changes: &[(JobIdx, Placement)],
        taken: &[usize],
        changed: &[usize],
    ) {
        for &k in taken {
            let _ = self.state.release(&changes[k].1);
        }
        for &k in changed {
            let i = changes[k].0 as usize;
            if self.rt[i].status == Status::Running {
                let _ = self.state.allocate(&self.rt[i].placement.clone());
            }
        }
    }

    /// The changes left once every running job the policy only moves (the same GPU
    /// count elsewhere) keeps its GPUs where no job that does move or start needs them:
    /// live, a move is a restart, and a policy that places from scratch each round
    /// (ElasticFlow's buddy) would otherwise restart jobs whose size it did not change.
    fn kept_in_place(&self, changes: &[(JobIdx, Placement)], changed: Vec<usize>) -> Vec<usize> {
        let mut keep: Vec<bool> = changed
            .iter()
            .map(|&k| {
                let (i, p) = (&changes[k].0, &changes[k].1);
                let rt = &self.rt[*i as usize];
                rt.status == Status::Running && p.gpus() > 0 && p.gpus() == rt.placement.gpus()
            })
            .collect();
        loop {
            let mut dropped = false;
            for a in 0..changed.len() {
                if !keep[a] {
                    continue;
                }
                let old = &self.rt[changes[changed[a]].0 as usize].placement;
                let clash =
                    (0..changed.len()).any(|b| !keep[b] && overlaps(old, &changes[changed[b]].1));
                if clash {
                    keep[a] = false;
                    dropped = true;
                }
            }
            if !dropped {
                break;
            }
        }
        changed
            .into_iter()
            .zip(keep)
            .filter(|&(_, kept)| !kept)
            .map(|(k, _)| k)
            .collect()
    }

    /// The live form of a checked reassignment: changed running jobs stop (fenced),
    /// then jobs that were pending start where their GPUs are free and they may start.
    /// A job stopped here never starts in the same step: its processes still run.
    fn stop_and_start(
        &mut self,
        changes: &[(JobIdx, Placement)],
        changed: &[usize],
    ) -> Vec<Action> {
        let mut out = Vec::with_capacity(changed.len());
        let mut starts = Vec::with_capacity(changed.len());
        for &k in changed {
            let i = changes[k].0;
            if self.rt[i as usize].status == Status::Running {
                if self.stop(i, true) {
                    out.push(Action::Preempt(i));
                }
            } else {
                starts.push(k);
            }
        }
        for k in starts {
            let (i, p) = (changes[k].0, &changes[k].1);
            if self.startable(i) && p.gpus() > 0 && self.state.allocate(p).is_ok() {
                self.mark_running(i, p.clone());
                out.push(Action::Start(i));
            }
        }
        out
    }
}

/// Whether two placements share a GPU.
fn overlaps(a: &Placement, b: &Placement) -> bool {
    a.parts
        .iter()
        .any(|&(n, m)| b.parts.iter().any(|&(o, k)| o == n && m & k != 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::{ClusterSpec, Job};

    fn on(node: u32, mask: u64) -> Placement {
        Placement {
            parts: vec![(node, mask)],
        }
    }

    /// Two nodes of 4 GPUs, live (fenced): job 0 runs on node 0's first two GPUs, job 1
    /// (2 GPUs) waits.
    fn live() -> World {
        let cluster = ClusterSpec::preset("n2g4").unwrap().build().unwrap();
        let jobs = vec![Job::new("a", 0, 2, 1000), Job::new("b", 0, 2, 1000)];
        let mut w = World::new(cluster, jobs);
        w.fence_preemptions = true;
        w.submit(0);
        w.submit(1);
        assert!(w.start(0, on(0, 0b0011)));
        w
    }

    #[test]
    fn live_a_moved_job_stops_and_its_gpus_stay_held() {
        // The policy moves job 0 over and gives its GPUs to job 1: job 0 stops, its
        // GPUs held (fenced) until its processes end, so job 1 cannot start yet.
        let mut w = live();
        let done = w.reassign(&[(0, on(0, 0b1100)), (1, on(0, 0b0011))]);
        assert_eq!(done, Some(vec![Action::Preempt(0)]));
        assert_eq!(w.take_fenced(), vec![(0, on(0, 0b0011))]);
        assert_eq!(w.rt[1].status, Status::Pending);
    }

    #[test]
    fn live_a_job_moved_at_its_size_keeps_gpus_no_one_needs() {
        // The policy moves job 0 to node 1 and starts job 1 beside its old GPUs: job 0
        // stays where it runs (a move would be a restart), and job 1 starts.
        let mut w = live();
        let done = w.reassign(&[(0, on(1, 0b0011)), (1, on(0, 0b1100))]);
        assert_eq!(done, Some(vec![Action::Start(1)]));
        assert_eq!(w.rt[0].placement, on(0, 0b0011));
        assert!(w.take_fenced().is_empty());
        // In the simulator the same call moves it.
        let mut w = live();
        w.fence_preemptions = false;
        let done = w.reassign(&[(0, on(1, 0b0011)), (1, on(0, 0b1100))]);
        assert_eq!(done, Some(vec![Action::Resize(0), Action::Start(1)]));
        assert_eq!(w.rt[0].placement, on(1, 0b0011));
    }
}
