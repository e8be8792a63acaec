//! The pass that FIFO, SJF, SRTF, SRSF and Tiresias share: walk jobs in priority order,
//! keep or start each one that fits, preempt running ones that no longer do.
//!
//! This is the Tiresias-family simulators' scheduling loop. In preemptive mode it counts
//! GPUs first from the full cluster capacity (a job is "selected" if its GPU count fits
//! in what higher-priority selections left), then preempts the running jobs that were
//! not selected, then places the selected pending ones in order; a selected job that
//! cannot be placed (fragmentation) stays pending. In non-preemptive mode it walks the
//! pending jobs and starts each that can be placed on the free GPUs.
//!
//! `backfill` decides what happens after the first pending job that does not fit: with
//! backfill, later (lower-priority) jobs that fit may start; without, no later pending job
//! starts in this pass (running jobs keep their GPUs).

use crate::ctx::Ctx;
use crate::placement::PlacementStrategy;
use crate::world::{JobIdx, Status};
use std::ops::ControlFlow;

/// How the pass behaves.
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    /// Whether running jobs may be preempted by higher-priority ones.
    pub preemptive: bool,
    /// Whether lower-priority jobs may start past a blocked one.
    pub backfill: bool,
    /// Where started jobs go.
    pub placement: PlacementStrategy,
}

/// Reusable buffers, so a pass allocates nothing in steady state.
#[derive(Default, Debug)]
pub struct Scratch {
    start: Vec<JobIdx>,
    preempt: Vec<JobIdx>,
    /// Jobs that started in the last pass, in start order.
    pub started: Vec<JobIdx>,
    /// Jobs preempted in the last pass.
    pub preempted: Vec<JobIdx>,
}

/// Whether every waiting job fits in the free GPUs. Then the preemptive pass keeps every
/// running job and selects every pending one whatever the order, so a caller may pass
/// only its pending jobs, in its order (which decides only placement order): on an
/// unsaturated cluster that spares walking every running job at each arrival.
pub fn everything_fits(ctx: &Ctx<'_>) -> bool {
    ctx.pending_gpu_sum() <= ctx.free_gpus()
}

/// Runs one pass over `order` (highest priority first). `order` should hold every
/// pending job, and in preemptive mode every running job too.
pub fn pass(
    ctx: &mut Ctx<'_>,
    order: impl IntoIterator<Item = JobIdx>,
    opts: Opts,
    s: &mut Scratch,
) {
    s.start.clear();
    s.preempt.clear();
    s.started.clear();
    s.preempted.clear();
    let Some(min_pending) = ctx.min_pending_gpus() else {
        return; // nothing waits: nothing to start, and so no reason to preempt
    };
    if opts.preemptive {
        let mut cap = ctx.total_gpus();
        let running_total = ctx.running().len();
        let mut running_seen = 0;
        let mut blocked = false;
        // Internal iteration (`try_for_each`): callers pass chains of queue segments,
        // which fold several times faster than they step one `next` at a time.
        let _ = order.into_iter().try_for_each(|j| {
            let g = ctx.job(j).gpus as u64;
            match ctx.status(j) {
                Status::Running => {
                    running_seen += 1;
                    if g <= cap {
                        cap -= g;
                    } else {
                        s.preempt.push(j);
                    }
                }
                Status::Pending => {
                    if !blocked && g <= cap {
                        cap -= g;
                        s.start.push(j);
                    } else if !opts.backfill {
                        blocked = true;
                    }
                }
                _ => {}
            }
            if running_seen == running_total && (blocked || cap < min_pending as u64) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        for &j in &s.preempt {
            if ctx.preempt(j) {
                s.preempted.push(j);
            }
        }
        for &j in &s.start {
            if ctx.start_with(j, opts.placement) {
                s.started.push(j);
            } else if !opts.backfill {
                break;
            }
        }
    } else {
        let mut free = ctx.free_gpus();
        let _ = order.into_iter().try_for_each(|j| {
            if free < min_pending as u64 {
                return ControlFlow::Break(());
            }
            if ctx.status(j) != Status::Pending {
                return ControlFlow::Continue(());
            }
            let g = ctx.job(j).gpus as u64;
            if g <= free && ctx.start_with(j, opts.placement) {
                free -= g;
                s.started.push(j);
            } else if !opts.backfill {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        });
    }
}
