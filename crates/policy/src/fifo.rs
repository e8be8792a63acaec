//! FIFO and SJF: non-preemptive queues ordered by submission or by job duration.
//!
//! SJF reads each job's duration, which a real scheduler would not know: it is the
//! oracle baseline the Tiresias and Muri papers compare against.

use crate::PolicyError;
use crate::ctx::Ctx;
use crate::greedy::{self, Opts, Scratch};
use crate::spec::{BACKFILL_OFF, Capabilities, Capability, PLACE_CONS, ParamSpec, PolicySpec};
use crate::world::JobIdx;
use crate::{ParamError, Params, PlacementStrategy, Policy};
use std::collections::BTreeSet;
/// `fifo`: its spec.
pub const FIFO: PolicySpec = PolicySpec {
    name: "fifo",
    about: "first in, first out; non-preemptive",
    capabilities: Capabilities::of(&[]),
    params: &[BACKFILL_OFF, PLACE_CONS],
    build: |p| Ok(Box::new(Queue::new(Order::Fifo, p)?)),
};

/// `sjf`: its spec.
pub const SJF: PolicySpec = PolicySpec {
    name: "sjf",
    about: "shortest job first by duration; non-preemptive (oracle)",
    capabilities: Capabilities::of(&[Capability::Durations]),
    params: &[BACKFILL_OFF, PLACE_CONS],
    build: |p| Ok(Box::new(Queue::new(Order::Sjf, p)?)),
};

/// Queue order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Submission order.
    Fifo,
    /// Shortest (reference) duration first, then submission order.
    Sjf,
}

/// A non-preemptive ordered queue.
#[derive(Debug)]
pub struct Queue {
    order: Order,
    opts: Opts,
    pending: BTreeSet<(u64, JobIdx)>,
    scratch: Scratch,
}

impl Queue {
    /// Builds from parameters `backfill` and `placement`, as [`FIFO`] lists them.
    pub fn new(order: Order, p: &Params) -> Result<Queue, ParamError> {
        Ok(Queue {
            order,
            opts: Opts {
                preemptive: false,
                backfill: p.bool(&BACKFILL_OFF)?,
                placement: placement_param(p, &PLACE_CONS)?,
            },
            pending: BTreeSet::new(),
            scratch: Scratch::default(),
        })
    }
}

impl Queue {
    /// Sort key within the queue; ties break by job index, i.e. submission order.
    fn key(&self, ctx: &Ctx<'_>, j: JobIdx) -> u64 {
        match self.order {
            Order::Fifo => 0,
            Order::Sjf => ctx.job(j).duration,
        }
    }
}

/// Reads the `placement` parameter.
pub fn placement_param(p: &Params, spec: &ParamSpec) -> Result<PlacementStrategy, ParamError> {
    let s = p.text(spec);
    PlacementStrategy::parse(s).ok_or_else(|| ParamError::Bad {
        key: spec.key.into(),
        value: s.into(),
        message: format!("expected one of {}", PlacementStrategy::NAMES),
    })
}

impl Policy for Queue {
    fn spec(&self) -> &'static PolicySpec {
        match self.order {
            Order::Fifo => &FIFO,
            Order::Sjf => &SJF,
        }
    }
    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        self.pending.insert((self.key(ctx, j), j));
        Ok(())
    }
    fn on_requeue(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        // Back in its submission-order place.
        self.pending.insert((self.key(ctx, j), j));
    }
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        greedy::pass(
            ctx,
            self.pending.iter().map(|k| k.1),
            self.opts,
            &mut self.scratch,
        );
        for &j in &self.scratch.started {
            self.pending.remove(&(self.key(ctx, j), j));
        }
        Ok(())
    }
}
