//! Pauses in a running job's progress (`stalls`): the cost of rescaling or switching it
//! (Gandiva, ElasticFlow), or a cap on its progress at a time (the ElasticFlow artifact
//! credits a round's work only up to its plan's exact end).

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::{Action, JobIdx, Status};
use apiary_model::Time;

/// The `stalls` mechanism.
pub enum Stalls {}

impl Mechanism for Stalls {
    const CAPABILITY: Capability = Capability::Stalls;
}

impl Handle<'_, '_, Stalls> {
    /// A running job makes no progress for `dur` from now (or from the end of a stall
    /// it is already in).
    pub fn stall(&mut self, i: JobIdx, dur: Time) {
        let w = &mut *self.ctx.w;
        if dur == 0 || w.rt[i as usize].status != Status::Running {
            return;
        }
        w.sync(i);
        let now = w.now;
        let rt = &mut w.rt[i as usize];
        rt.overhead_until = rt.overhead_until.max(now).saturating_add(dur);
        self.ctx.actions.push(Action::Stall(i));
    }

    /// A pause of `dur` from now that replaces whatever is left of an earlier one, as
    /// ElasticFlow's artifact charges each round's overhead afresh (a restart round's
    /// 62 s in a 60 s round costs the round, not 2 s of the next).
    pub fn restall(&mut self, i: JobIdx, dur: Time) {
        let w = &mut *self.ctx.w;
        if w.rt[i as usize].status != Status::Running {
            return;
        }
        w.sync(i);
        let now = w.now;
        let rt = &mut w.rt[i as usize];
        let until = now + dur;
        if rt.overhead_until != until && (dur > 0 || rt.overhead_until > now) {
            rt.overhead_until = until;
            self.ctx.actions.push(Action::Stall(i));
        }
    }

    /// A running job makes no progress after `t` until this is called again (0 or a
    /// time not after now: no cap).
    pub fn cap_work(&mut self, i: JobIdx, t: Time) {
        let w = &mut *self.ctx.w;
        if w.rt[i as usize].status != Status::Running {
            return;
        }
        w.sync(i);
        let t = if t > w.now { t } else { 0 };
        if w.plan_end(i).work_until != t {
            w.plan_end_mut(i).work_until = t;
            self.ctx.actions.push(Action::Cap(i));
        }
    }
}
