//! One job run through a failure model and a checkpoint plan, failure by failure: the
//! check on the planner's closed form, with nothing averaged away.
//!
//! The job trains; each level saves after its interval of training, stalling the job;
//! failures arrive as independent Poisson processes per class, at any moment (during a
//! save, a restore or a restart too). A failure destroys the checkpoints of the levels
//! that do not survive its kind, and the job goes back to the newest one that does: the
//! work since then is lost, and it restores and restarts before training again. A save
//! cut short by a failure counts for nothing.

use super::FailureModel;
use super::checkpoint::Plan;
use apiary_core::Rng;

/// What a run gives: seconds of wall-clock time by use, and failures by class.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// Training kept at the end (progress).
    pub useful_s: f64,
    /// Training done and then lost to failures.
    pub rework_s: f64,
    /// Stalled saving (cut-short saves included).
    pub checkpoint_s: f64,
    /// Reading checkpoints back.
    pub restore_s: f64,
    /// Restarting.
    pub restart_s: f64,
    /// Failures per class, in the model's order.
    pub failures: Vec<u64>,
}

impl Run {
    /// Effective training time ratio.
    pub fn ettr(&self) -> f64 {
        self.useful_s / self.wall_s
    }
}

/// Runs a job on `plan.gpus` GPUs for `hours` of wall-clock time, seeded by `seed`.
/// `survives[l][k]` says whether level `l`'s checkpoints survive class `k`.
pub fn simulate(
    model: &FailureModel,
    plan: &Plan,
    survives: &[Vec<bool>],
    hours: f64,
    seed: u64,
) -> Run {
    let rates: Vec<f64> = model
        .classes
        .iter()
        .map(|c| model.recoverable_rate(c, plan.gpus) / 3600.0)
        .collect();
    let mut s = Sim {
        total: rates.iter().sum(),
        rates,
        rng: Rng::stream(seed, "failures"),
        run: Run {
            failures: vec![0; model.classes.len()],
            ..Run::default()
        },
        // The start is a checkpoint at every level.
        saved: vec![Some(0.0); plan.levels.len()],
        due: plan.levels.iter().map(|l| l.interval_s).collect(),
        progress: 0.0,
        t: 0.0,
        end: hours * 3600.0,
        restart_s: model.restart_s,
        plan,
        survives,
    };
    let mut next_failure = s.draw();
    while s.t < s.end {
        let save = (0..plan.levels.len())
            .filter(|&l| s.due[l].is_finite())
            .min_by(|&a, &b| s.due[a].total_cmp(&s.due[b]).then(a.cmp(&b)));
        let train = save.map_or(f64::INFINITY, |l| (s.due[l] - s.progress).max(0.0));
        // Train until the save, the failure or the end, whichever comes first.
        let stop = (s.t + train).min(next_failure).min(s.end);
        s.progress += stop - s.t;
        s.t = stop;
        if s.t >= s.end {
            break;
        }
        if s.t >= next_failure {
            next_failure = s.fail();
            continue;
        }
        let l = save.expect("neither the end nor a failure: a save is due");
        let done = s.t + plan.levels[l].stall_s;
        if done > next_failure || done > s.end {
            // Cut short: the stall is spent and the save counts for nothing.
            let cut = next_failure.min(s.end);
            s.run.checkpoint_s += cut - s.t;
            s.t = cut;
            if s.t < s.end {
                next_failure = s.fail();
            }
            continue;
        }
        s.run.checkpoint_s += done - s.t;
        s.t = done;
        s.saved[l] = Some(s.progress);
        s.due[l] = s.progress + plan.levels[l].interval_s;
    }
    s.run.wall_s = s.end;
    s.run.useful_s = s.progress;
    s.run
}

struct Sim<'a> {
    plan: &'a Plan,
    survives: &'a [Vec<bool>],
    rates: Vec<f64>,
    total: f64,
    restart_s: f64,
    rng: Rng,
    run: Run,
    /// The progress each level last saved, while its checkpoint exists.
    saved: Vec<Option<f64>>,
    /// The progress at which each level saves next.
    due: Vec<f64>,
    progress: f64,
    t: f64,
    end: f64,
}

impl Sim<'_> {
    /// The time of the next failure after now.
    fn draw(&mut self) -> f64 {
        if self.total > 0.0 {
            self.t + self.rng.exp(1.0 / self.total)
        } else {
            f64::INFINITY
        }
    }

    /// A failure now: lose the work since the newest surviving checkpoint, then restore
    /// and restart; a failure during either starts recovery over. Returns the time of
    /// the next failure.
    fn fail(&mut self) -> f64 {
        let mut next = self.t;
        while next <= self.t && self.t < self.end {
            let k = self.rng.weighted(&self.rates);
            self.run.failures[k] += 1;
            for (l, s) in self.saved.iter_mut().enumerate() {
                if !self.survives[l][k] {
                    *s = None;
                }
            }
            let levels = &self.plan.levels;
            // The newest surviving checkpoint, the faster to restore on ties; none left
            // (levels that survive one kind but not a milder one): from the start.
            let (restore, at) = self
                .saved
                .iter()
                .enumerate()
                .filter_map(|(l, s)| s.map(|p| (levels[l].restore_s, p)))
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.total_cmp(&a.0)))
                .unwrap_or((0.0, 0.0));
            self.run.rework_s += self.progress - at;
            self.progress = at;
            next = self.draw();
            let back = (self.t + restore + self.restart_s).min(self.end);
            let until = back.min(next);
            // Time down goes to the restore first, then the restart.
            let spent = until - self.t;
            self.run.restore_s += spent.min(restore);
            self.run.restart_s += (spent - restore).max(0.0);
            self.t = until;
        }
        for (l, lp) in self.plan.levels.iter().enumerate() {
            self.due[l] = self.progress + lp.interval_s;
        }
        next
    }
}
