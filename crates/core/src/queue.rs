//! The engine's event queue: events of one type keyed by `(time, seq)`.
//!
//! Equal times pop in the order they were pushed, so a run never depends on how a heap
//! breaks ties. Events that a later decision makes stale (a completion after a
//! preemption) are not removed; the driver skips them as it meets them
//! ([`EventQueue::skip`]) and sweeps them out when they pile up ([`EventQueue::retain`]).
//! Both drivers and the LLM serving simulator use it with their own event types.

use crate::time::Time;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// A time-ordered queue of events of type `E`.
#[derive(Clone, Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<Entry<E>>>,
    seq: u64,
}

#[derive(Clone, Debug)]
struct Entry<E> {
    time: Time,
    seq: u64,
    event: E,
}

// Ordered by `(time, seq)` alone: the payload never breaks a tie, so it needs no `Ord`.
impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.time, self.seq).cmp(&(other.time, other.seq))
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `event` at `time`, after every event already at that time.
    pub fn push(&mut self, time: Time, event: E) {
        self.heap.push(Reverse(Entry {
            time,
            seq: self.seq,
            event,
        }));
        self.seq += 1;
    }

    /// The earliest event and its time.
    pub fn peek(&self) -> Option<(Time, &E)> {
        self.heap.peek().map(|Reverse(e)| (e.time, &e.event))
    }

    /// Removes and returns the earliest event if it is due at `now` or before.
    pub fn pop_due(&mut self, now: Time) -> Option<(Time, E)> {
        if self.heap.peek()?.0.time > now {
            return None;
        }
        self.heap.pop().map(|Reverse(e)| (e.time, e.event))
    }

    /// Drops events from the front while `stale` says so; afterwards the front, if any,
    /// is live.
    pub fn skip(&mut self, mut stale: impl FnMut(&E) -> bool) {
        while let Some(Reverse(e)) = self.heap.peek() {
            if !stale(&e.event) {
                break;
            }
            self.heap.pop();
        }
    }

    /// Keeps only the events `keep` accepts (their order is unchanged).
    pub fn retain(&mut self, mut keep: impl FnMut(&E) -> bool) {
        self.heap.retain(|Reverse(e)| keep(&e.event));
    }

    /// Events held, stale ones included.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_times_pop_in_push_order() {
        let mut q = EventQueue::new();
        q.push(5, 'b');
        q.push(3, 'a');
        q.push(5, 'c');
        q.push(5, 'd');
        assert_eq!(q.peek(), Some((3, &'a')));
        assert_eq!(q.pop_due(2), None);
        let mut out = Vec::new();
        while let Some((t, e)) = q.pop_due(5) {
            out.push((t, e));
        }
        assert_eq!(out, [(3, 'a'), (5, 'b'), (5, 'c'), (5, 'd')]);
        assert!(q.is_empty());
    }

    #[test]
    fn skip_and_retain_drop_stale_events() {
        let mut q = EventQueue::new();
        for (t, e) in [(1, 10), (2, 11), (3, 20), (4, 12)] {
            q.push(t, e);
        }
        q.skip(|&e| e < 20 && e % 2 == 0);
        assert_eq!(q.peek(), Some((2, &11)));
        q.retain(|&e| e != 20);
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop_due(10), Some((2, 11)));
        assert_eq!(q.pop_due(10), Some((4, 12)));
    }
}
