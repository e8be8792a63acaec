//! A job's plan end (`holds`): simulators that end a job only at its plan's
//! slot-aligned end keep its GPUs until then, end it there with work left, or judge its
//! deadline there (ElasticFlow and its EDF baseline).

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::{Action, JobIdx, Status};
use apiary_model::Time;

/// The `holds` mechanism.
pub enum Holds {}

impl Mechanism for Holds {
    const CAPABILITY: Capability = Capability::Holds;
}

impl Handle<'_, '_, Holds> {
    /// A running job whose work ends before `t` keeps its GPUs and completes at `t`
    /// (replacing any earlier hold; a time not after now clears it).
    pub fn hold_until(&mut self, i: JobIdx, t: Time) {
        let w = &mut *self.ctx.w;
        if w.rt[i as usize].status != Status::Running {
            return;
        }
        let t = if t > w.now { t } else { 0 };
        if w.plan_end(i).hold_until != t {
            w.sync(i);
            w.plan_end_mut(i).hold_until = t;
            self.ctx.actions.push(Action::Hold(i));
        }
    }

    /// A running job completes at `t` at the latest, with whatever work it has left
    /// (now, for a time not after now; 0 clears it): the ElasticFlow artifact's end
    /// event.
    pub fn end_by(&mut self, i: JobIdx, t: Time) {
        let w = &mut *self.ctx.w;
        if w.rt[i as usize].status != Status::Running {
            return;
        }
        let t = if t == 0 { 0 } else { t.max(w.now) };
        if w.plan_end(i).end_by != t {
            w.sync(i);
            w.plan_end_mut(i).end_by = t;
            self.ctx.actions.push(Action::End(i));
        }
    }

    /// Judges the job's deadline at `t` rather than at its completion (the ElasticFlow
    /// artifact judges on its plan's exact end).
    pub fn judge_deadline_at(&mut self, i: JobIdx, t: Time) {
        self.ctx.w.plan_end_mut(i).judged = Some(t);
    }
}
