//! The one event loop of request-level serving, for a single service's instances
//! ([`crate::engine`]) and for a pool shared by several services ([`crate::pool`]).
//!
//! Requests arrive in trace order (those refused up front are skipped); everything else
//! (iterations ending, migration stages, scaling and re-placement decisions, samples)
//! is an event on the simulation's own [`EventQueue`], keyed by `(time, seq)`. An
//! arrival goes first only when it is strictly earlier than the next event, so an
//! iteration ending at the arrival's microsecond is seen before it. The run ends when
//! every request that runs is done.

use crate::workload::{Micros, Request};
use apiary_core::EventQueue;

/// A serving simulation as the loop drives it.
pub(crate) trait Serving {
    /// Its events.
    type Event;
    /// Its event queue.
    fn queue(&mut self) -> &mut EventQueue<Self::Event>;
    /// Whether request `r` was refused up front (it never arrives).
    fn refused(&self, r: usize) -> bool;
    /// Moves the clock to `t` and counts an event there.
    fn tick(&mut self, t: Micros);
    /// Request `r` arrives (the clock is at its arrival).
    fn arrive(&mut self, r: usize);
    /// An event is due (the clock is at its time).
    fn handle(&mut self, ev: Self::Event);
    /// Requests done, and requests to run in all.
    fn progress(&self) -> (usize, usize);
    /// Checks the simulation's invariants (debug builds, after every step).
    fn audit(&self) {}
}

/// Runs `sim` over `requests` (sorted by arrival) until every request that runs is
/// done, calling `progress` with (done, total) every 4,096 requests and at the end.
pub(crate) fn run<S: Serving>(
    sim: &mut S,
    requests: &[Request],
    progress: &mut dyn FnMut(usize, usize),
) {
    let mut next = 0usize;
    let mut reported = 0;
    loop {
        let (done, total) = sim.progress();
        if done >= total {
            break;
        }
        while next < requests.len() && sim.refused(next) {
            next += 1;
        }
        let arrival = requests.get(next).map(|r| r.arrival);
        let event = sim.queue().peek().map(|(t, _)| t);
        match (arrival, event) {
            (Some(a), e) if e.is_none_or(|e| a < e) => {
                sim.tick(a);
                sim.arrive(next);
                next += 1;
            }
            (_, Some(_)) => {
                let Some((t, ev)) = sim.queue().pop_due(Micros::MAX) else {
                    break;
                };
                sim.tick(t);
                sim.handle(ev);
            }
            _ => break,
        }
        if cfg!(debug_assertions) {
            sim.audit();
        }
        let done = sim.progress().0;
        if done >= reported + 4096 {
            reported = done;
            progress(done, sim.progress().1);
        }
    }
    let (done, total) = sim.progress();
    progress(done, total);
}
