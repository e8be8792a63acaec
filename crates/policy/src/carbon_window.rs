//! `carbon-window`: GAIA's "Lowest-Window" baseline (Hanafy et al., ASPLOS '24; the
//! "Wait AWhile" policy of Wiesner et al., Middleware '21). Each job waits for the start,
//! within `max_wait` of its submission, at which running it through emits the least:
//! the window of its length with the lowest mean intensity, read from the series as a
//! perfect forecast. From that start it queues first-come first-served and runs
//! unpaused.
//!
//! It reads job lengths (`durations`), as GAIA's evaluation gives its policies, and the
//! whole series ahead (`carbon`), as GAIA's perfect-forecast runs do.

use crate::ctx::{Ctx, Handles};
use crate::fifo::placement_param;
use crate::greedy::{self, Opts, Scratch};
use crate::spec::{BACKFILL_OFF, Capabilities, Capability, PLACE_CONS, ParamSpec, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy, PolicyError};
use apiary_model::energy::Intensity;
use apiary_model::{HOUR, Time};
use std::collections::BTreeSet;

const MAX_WAIT: ParamSpec = ParamSpec {
    key: "max_wait",
    default: "24",
    about: "hours a job may be held past its submission for a cleaner window",
};

/// `carbon-window`: its spec.
pub const CARBON_WINDOW: PolicySpec = PolicySpec {
    name: "carbon-window",
    about: "GAIA's Lowest-Window: each job waits, up to max_wait, for the start whose run emits least; then FIFO",
    capabilities: Capabilities::of(&[Capability::Carbon, Capability::Durations]),
    params: &[MAX_WAIT, BACKFILL_OFF, PLACE_CONS],
    build: |p| Ok(Box::new(CarbonWindow::new(p)?)),
};

/// The policy.
#[derive(Debug)]
pub struct CarbonWindow {
    max_wait: Time,
    opts: Opts,
    /// Admitted jobs whose start is not chosen yet (chosen at the next pass, which may
    /// read the series).
    new: Vec<JobIdx>,
    /// Jobs held for their start: (start, job).
    held: BTreeSet<(Time, JobIdx)>,
    /// Jobs past their start, in start order: (start, job).
    ready: BTreeSet<(Time, JobIdx)>,
    scratch: Scratch,
}

/// The start in `[submit, submit + max_wait]` (the submission, or a later hour) whose
/// run of `len` emits least under `s`; the earliest of equals.
pub fn best_start(s: &Intensity, submit: Time, len: Time, max_wait: Time) -> Time {
    let mut best = (s.integral(submit, submit + len), submit);
    let mut t = (submit / HOUR + 1) * HOUR;
    while t <= submit + max_wait {
        let c = s.integral(t, t + len);
        if c < best.0 {
            best = (c, t);
        }
        t += HOUR;
    }
    best.1
}

impl CarbonWindow {
    /// From `max_wait`, `backfill` and `placement`.
    pub fn new(p: &Params) -> Result<CarbonWindow, ParamError> {
        let hours = p.f64(&MAX_WAIT)?;
        let max_wait =
            apiary_model::time::secs_f64(hours * 3600.0).ok_or_else(|| ParamError::Bad {
                key: MAX_WAIT.key.into(),
                value: p.text(&MAX_WAIT).into(),
                message: "hours, 0 to 10^8".into(),
            })?;
        Ok(CarbonWindow {
            max_wait,
            opts: Opts {
                preemptive: false,
                backfill: p.bool(&BACKFILL_OFF)?,
                placement: placement_param(p, &PLACE_CONS)?,
            },
            new: Vec::new(),
            held: BTreeSet::new(),
            ready: BTreeSet::new(),
            scratch: Scratch::default(),
        })
    }
}

impl Policy for CarbonWindow {
    fn spec(&self) -> &'static PolicySpec {
        &CARBON_WINDOW
    }
    fn admit(&mut self, _ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        self.new.push(j);
        Ok(())
    }
    fn on_requeue(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        // A job that ran already is not held again.
        self.ready.insert((ctx.now(), j));
    }
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let now = ctx.now();
        if !self.new.is_empty() {
            let c = ctx.carbon()?;
            let starts: Vec<(Time, JobIdx)> = self
                .new
                .iter()
                .map(|&j| {
                    let job = c.job(j);
                    let start = c.series().map_or(job.submit, |s| {
                        best_start(s, job.submit, job.duration, self.max_wait)
                    });
                    (start, j)
                })
                .collect();
            self.new.clear();
            self.held.extend(starts);
        }
        while let Some(&(t, j)) = self.held.first() {
            if t > now {
                break;
            }
            self.held.pop_first();
            self.ready.insert((t, j));
        }
        greedy::pass(
            ctx,
            self.ready.iter().map(|k| k.1),
            self.opts,
            &mut self.scratch,
        );
        if !self.scratch.started.is_empty() {
            self.ready
                .retain(|&(_, j)| ctx.status(j) == Status::Pending);
        }
        if let Some(&(t, _)) = self.held.first() {
            ctx.wake_at(t);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_is_the_cleanest_window_within_the_wait() {
        // Hours at 300, 300, 100, 100, 300 ... (period 5).
        let s = Intensity::new("t", vec![300.0, 300.0, 100.0, 100.0, 300.0], 0);
        // A 2 h job submitted at 0.5 h: the clean pair starts at 2 h.
        assert_eq!(best_start(&s, HOUR / 2, 2 * HOUR, 24 * HOUR), 2 * HOUR);
        // Held at most an hour: 1 h (300 + 100) beats 0.5 h (300 + 300 ... ).
        assert_eq!(best_start(&s, HOUR / 2, 2 * HOUR, HOUR), HOUR);
        // No wait allowed: at once.
        assert_eq!(best_start(&s, HOUR / 2, 2 * HOUR, 0), HOUR / 2);
    }
}
