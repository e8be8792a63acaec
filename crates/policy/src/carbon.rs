//! `carbon-pause`: the simplest carbon-aware baseline. Jobs run first-come first-served
//! while the grid's carbon intensity is at or below a threshold, and every running job
//! is paused (preempted, keeping its progress) while it is above.
//!
//! This is the "suspend-resume" threshold policy that carbon-aware scheduling papers
//! (GAIA, ASPLOS '24; Wait AWhile, e-Energy '23) compare against: it moves work out of
//! dirty hours at the cost of waiting, and knows nothing of jobs' lengths. It decides
//! at every event and at every hour, when the intensity can change.

use crate::ctx::{Ctx, Handles};
use crate::fifo::placement_param;
use crate::greedy::{self, Opts, Scratch};
use crate::spec::{BACKFILL_OFF, Capabilities, Capability, PLACE_CONS, ParamSpec, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy, PolicyError};
use apiary_model::HOUR;
use apiary_model::energy::{DEFAULT_INTENSITY, Intensity};
use std::collections::BTreeSet;

const THRESHOLD: ParamSpec = ParamSpec {
    key: "threshold",
    default: "mean",
    about: "pause above this intensity: g/kWh, `mean` (the series') or `pNN` (its NNth percentile)",
};

/// `carbon-pause`: its spec.
pub const CARBON_PAUSE: PolicySpec = PolicySpec {
    name: "carbon-pause",
    about: "FIFO while the grid's carbon intensity is at or below a threshold; every job paused above it",
    capabilities: Capabilities::of(&[Capability::Carbon]),
    params: &[THRESHOLD, BACKFILL_OFF, PLACE_CONS],
    build: |p| Ok(Box::new(CarbonPause::new(p)?)),
};

/// How the threshold is given.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Threshold {
    /// g/kWh.
    Value(f64),
    /// The series' mean.
    Mean,
    /// The series' percentile (0..=100).
    Percentile(f64),
}

impl Threshold {
    fn parse(s: &str) -> Option<Threshold> {
        if s == "mean" {
            return Some(Threshold::Mean);
        }
        if let Some(p) = s.strip_prefix('p') {
            return p
                .parse::<f64>()
                .ok()
                .filter(|p| (0.0..=100.0).contains(p))
                .map(Threshold::Percentile);
        }
        s.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(Threshold::Value)
    }

    /// In g/kWh, for `series` (the documented constant without one).
    fn resolve(self, series: Option<&Intensity>) -> f64 {
        let constant = || series.map_or(DEFAULT_INTENSITY, Intensity::mean);
        match self {
            Threshold::Value(v) => v,
            Threshold::Mean => constant(),
            Threshold::Percentile(p) => series.map_or(DEFAULT_INTENSITY, |s| s.percentile(p)),
        }
    }
}

/// The policy.
#[derive(Debug)]
pub struct CarbonPause {
    threshold: Threshold,
    /// Resolved against the series it was resolved for (its address: live, the server
    /// replaces the series when its file changes, and `mean` or `pNN` follow it).
    limit: Option<(usize, f64)>,
    opts: Opts,
    pending: BTreeSet<JobIdx>,
    scratch: Scratch,
}

impl CarbonPause {
    /// From `threshold`, `backfill` and `placement`.
    pub fn new(p: &Params) -> Result<CarbonPause, ParamError> {
        let text = p.text(&THRESHOLD);
        let threshold = Threshold::parse(text).ok_or_else(|| ParamError::Bad {
            key: THRESHOLD.key.into(),
            value: text.into(),
            message: "expected g/kWh (a number >= 0), `mean` or `pNN` (0 to 100)".into(),
        })?;
        Ok(CarbonPause {
            threshold,
            limit: None,
            opts: Opts {
                preemptive: false,
                backfill: p.bool(&BACKFILL_OFF)?,
                placement: placement_param(p, &PLACE_CONS)?,
            },
            pending: BTreeSet::new(),
            scratch: Scratch::default(),
        })
    }

    /// The threshold in g/kWh for the series now; an error if the series repeats and
    /// no hour of it is at or below the threshold (nothing would ever run).
    fn limit(&mut self, ctx: &mut Ctx<'_>) -> Result<f64, PolicyError> {
        let c = ctx.carbon()?;
        let series = c.series();
        let key = series.map_or(0, |s| s as *const Intensity as usize);
        if let Some((k, l)) = self.limit
            && k == key
        {
            return Ok(l);
        }
        let l = self.threshold.resolve(series);
        let lowest = series.map_or(DEFAULT_INTENSITY, |s| s.percentile(0.0));
        if l < lowest && series.is_none_or(Intensity::repeats) {
            return Err(PolicyError::Cluster {
                policy: "carbon-pause",
                reason: format!(
                    "threshold {l} g/kWh is below every hour's intensity (lowest {lowest}): no job would ever run"
                ),
            });
        }
        self.limit = Some((key, l));
        Ok(l)
    }
}

impl Policy for CarbonPause {
    fn spec(&self) -> &'static PolicySpec {
        &CARBON_PAUSE
    }
    fn admit(&mut self, _ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        self.pending.insert(j);
        Ok(())
    }
    fn on_requeue(&mut self, _ctx: &Ctx<'_>, j: JobIdx) {
        self.pending.insert(j);
    }
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let limit = self.limit(ctx)?;
        let now = ctx.now();
        let dirty = ctx.carbon()?.at(now) > limit;
        if dirty {
            let running: Vec<JobIdx> = ctx.running().to_vec();
            for j in running {
                if ctx.preempt(j) {
                    self.pending.insert(j);
                }
            }
        } else {
            greedy::pass(
                ctx,
                self.pending.iter().copied(),
                self.opts,
                &mut self.scratch,
            );
            for j in &self.scratch.started {
                self.pending.remove(j);
            }
        }
        // Finished or declined jobs leave the queue (a paused job is pending again).
        if self.pending.len() > ctx.pending_count() {
            self.pending.retain(|&j| ctx.status(j) == Status::Pending);
        }
        // The intensity changes on the hour: look again then, while there is work.
        if !self.pending.is_empty() || !ctx.running().is_empty() {
            ctx.wake_at((now / HOUR + 1) * HOUR);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_and_resolve() {
        let s = Intensity::new("t", vec![100.0, 300.0, 200.0, 400.0], 0);
        assert_eq!(Threshold::parse("mean").unwrap().resolve(Some(&s)), 250.0);
        assert_eq!(Threshold::parse("p50").unwrap().resolve(Some(&s)), 200.0);
        assert_eq!(Threshold::parse("p100").unwrap().resolve(Some(&s)), 400.0);
        assert_eq!(Threshold::parse("150").unwrap().resolve(Some(&s)), 150.0);
        assert_eq!(
            Threshold::parse("mean").unwrap().resolve(None),
            DEFAULT_INTENSITY
        );
        assert!(Threshold::parse("p101").is_none());
        assert!(Threshold::parse("-1").is_none());
        assert!(CarbonPause::new(&Params::from_pairs(["threshold=high"]).unwrap()).is_err());
    }
}
