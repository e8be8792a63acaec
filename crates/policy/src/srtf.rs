//! SRTF and SRSF: preemptive shortest-remaining-time (or remaining GPU-service) first,
//! as the Tiresias and Muri simulators' `shortest` and `shortest-gpu`.
//!
//! Both know every job's remaining work (oracle baselines). Each pass re-sorts the
//! active jobs by remaining time (× GPUs for SRSF), ties by submission order.

use crate::PolicyError;
use crate::ctx::Ctx;
use crate::fifo::placement_param;
use crate::greedy::{self, Opts, Scratch};
use crate::spec::{BACKFILL_ON, Capabilities, Capability, PLACE_CONS, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy};
/// `srtf`: its spec.
pub const SRTF: PolicySpec = PolicySpec {
    name: "srtf",
    about: "shortest remaining time first; preemptive (oracle; Muri's `shortest`)",
    capabilities: Capabilities::of(&[Capability::Durations]),
    params: &[BACKFILL_ON, PLACE_CONS],
    build: |p| Ok(Box::new(Srtf::new(false, p)?)),
};

/// `srsf`: its spec.
pub const SRSF: PolicySpec = PolicySpec {
    name: "srsf",
    about: "shortest remaining GPU-service (time x GPUs) first; preemptive (oracle; Muri's `shortest-gpu`)",
    capabilities: Capabilities::of(&[Capability::Durations]),
    params: &[BACKFILL_ON, PLACE_CONS],
    build: |p| Ok(Box::new(Srtf::new(true, p)?)),
};

/// Shortest-remaining first.
#[derive(Debug)]
pub struct Srtf {
    service: bool,
    opts: Opts,
    active: Vec<JobIdx>,
    keyed: Vec<(u64, JobIdx)>,
    scratch: Scratch,
}

impl Srtf {
    /// `service` = SRSF. Parameters `backfill` and `placement`, as [`SRTF`] lists them.
    pub fn new(service: bool, p: &Params) -> Result<Srtf, ParamError> {
        Ok(Srtf {
            service,
            opts: Opts {
                preemptive: true,
                backfill: p.bool(&BACKFILL_ON)?,
                placement: placement_param(p, &PLACE_CONS)?,
            },
            active: Vec::new(),
            keyed: Vec::new(),
            scratch: Scratch::default(),
        })
    }
}

impl Policy for Srtf {
    fn spec(&self) -> &'static PolicySpec {
        if self.service { &SRSF } else { &SRTF }
    }
    fn admit(&mut self, _ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        self.active.push(j);
        Ok(())
    }
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        if ctx.pending_count() == 0 {
            return Ok(());
        }
        // Finished jobs leave lazily, once they would make up half the list, so the
        // cost stays linear in the jobs still active.
        if self.active.len() > 2 * (ctx.running().len() + ctx.pending_count()) + 64 {
            self.active.retain(|&j| ctx.status(j) != Status::Finished);
        }
        // Only the pending jobs need sorting when they all fit (see `everything_fits`).
        if greedy::everything_fits(ctx) {
            self.keyed.clear();
            // The world's pending list, where the view has one, spares a walk over the
            // running jobs at every arrival.
            match ctx.pending_jobs() {
                Some(pending) => {
                    for &j in pending {
                        self.keyed.push((key(self.service, ctx, j), j));
                    }
                }
                None => {
                    for &j in &self.active {
                        if ctx.status(j) == Status::Pending {
                            self.keyed.push((key(self.service, ctx, j), j));
                        }
                    }
                }
            }
            self.keyed.sort_unstable();
            greedy::pass(
                ctx,
                self.keyed.iter().map(|k| k.1),
                self.opts,
                &mut self.scratch,
            );
            return Ok(());
        }
        self.keyed.clear();
        for &j in &self.active {
            if ctx.status(j) != Status::Finished {
                self.keyed.push((key(self.service, ctx, j), j));
            }
        }
        self.keyed.sort_unstable();
        greedy::pass(
            ctx,
            self.keyed.iter().map(|k| k.1),
            self.opts,
            &mut self.scratch,
        );
        Ok(())
    }
}

/// Remaining time (× GPUs for SRSF) as a sortable integer: non-negative floats order
/// like their bit patterns.
fn key(service: bool, ctx: &Ctx<'_>, j: JobIdx) -> u64 {
    let r = ctx.remaining(j);
    (if service {
        r * ctx.job(j).gpus as f64
    } else {
        r
    })
    .to_bits()
}
