//! The engine's event queue: events of one type keyed by `(time, seq)`.
//!
//! Equal times pop in the order they were pushed, so a run never depends on how a heap
//! breaks ties. Events that a later decision makes stale (a completion after a
//! preemption) are not removed; the driver skips them as it meets them
//! ([`EventQueue::skip`]) and sweeps them out when they pile up ([`EventQueue::retain`]).
//! Both drivers and the LLM serving simulator use it with their own event types.

use crate::time::Time;

/// A time-ordered queue of events of type `E`.
///
/// A four-ary min-heap on `(time, seq)`: half the levels of a binary heap, and the four
/// children of a slot share a cache line or two, so a pop (the driver's most frequent
/// queue operation) reads fewer lines than `std`'s binary heap did. Keys are unique
/// (`seq` is), so any heap pops the same order: the layout decides only speed.
#[derive(Clone, Debug)]
pub struct EventQueue<E> {
    heap: Vec<Entry<E>>,
    seq: u64,
}

#[derive(Clone, Debug)]
struct Entry<E> {
    time: Time,
    seq: u64,
    event: E,
}

impl<E> Entry<E> {
    /// `(time, seq)` as one integer: one comparison instead of two.
    #[inline(always)]
    fn key(&self) -> u128 {
        (self.time as u128) << 64 | self.seq as u128
    }
}

const ARITY: usize = 4;

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: Vec::new(),
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
        let seq = self.seq;
        self.seq += 1;
        self.heap.push(Entry { time, seq, event });
        self.sift_up(self.heap.len() - 1);
    }

    /// The earliest event and its time.
    #[inline]
    pub fn peek(&self) -> Option<(Time, &E)> {
        self.heap.first().map(|e| (e.time, &e.event))
    }

    /// Removes and returns the earliest event if it is due at `now` or before.
    #[inline]
    pub fn pop_due(&mut self, now: Time) -> Option<(Time, E)> {
        if self.heap.first()?.time > now {
            return None;
        }
        self.pop().map(|e| (e.time, e.event))
    }

    /// Drops events from the front while `stale` says so; afterwards the front, if any,
    /// is live.
    pub fn skip(&mut self, mut stale: impl FnMut(&E) -> bool) {
        while let Some(e) = self.heap.first() {
            if !stale(&e.event) {
                break;
            }
            self.pop();
        }
    }

    /// Keeps only the events `keep` accepts (their order is unchanged).
    pub fn retain(&mut self, mut keep: impl FnMut(&E) -> bool) {
        let before = self.heap.len();
        self.heap.retain(|e| keep(&e.event));
        if self.heap.len() != before {
            self.heapify();
        }
    }

    /// Events held, stale ones included.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    fn pop(&mut self) -> Option<Entry<E>> {
        let last = self.heap.pop()?;
        if self.heap.is_empty() {
            return Some(last);
        }
        let top = std::mem::replace(&mut self.heap[0], last);
        self.sift_down(0);
        Some(top)
    }

    fn sift_up(&mut self, i: usize) {
        self.sift_up_to(i, 0);
    }

    /// Moves the entry at `i` up while its parent is later, but not above `top`.
    #[inline]
    fn sift_up_to(&mut self, mut i: usize, top: usize) {
        let h = &mut self.heap[..];
        let key = h[i].key();
        while i > top {
            let parent = (i - 1) / ARITY;
            if h[parent].key() <= key {
                break;
            }
            h.swap(i, parent);
            i = parent;
        }
    }

    /// Restores the heap below `top` after its entry changed. Bottom-up: the earliest
    /// child moves up a level at each step down to a leaf, and the entry is then
    /// sifted up from there, no higher than `top`. A popped heap's entry comes from its last leaf and
    /// belongs near the bottom, so this spares a comparison with it at every level.
    fn sift_down(&mut self, top: usize) {
        let h = &mut self.heap[..];
        let n = h.len();
        let mut i = top;
        loop {
            let first = i * ARITY + 1;
            let best = if first + ARITY <= n {
                let (a, b) = (h[first].key(), h[first + 1].key());
                let (c, d) = (h[first + 2].key(), h[first + 3].key());
                let (ab, at_ab) = if b < a { (b, first + 1) } else { (a, first) };
                let (cd, at_cd) = if d < c {
                    (d, first + 3)
                } else {
                    (c, first + 2)
                };
                if cd < ab { at_cd } else { at_ab }
            } else if first < n {
                let mut best = first;
                for c in first + 1..n {
                    if h[c].key() < h[best].key() {
                        best = c;
                    }
                }
                best
            } else {
                break;
            };
            h.swap(i, best);
            i = best;
        }
        self.sift_up_to(i, top);
    }

    fn heapify(&mut self) {
        let n = self.heap.len();
        if n < 2 {
            return;
        }
        for i in (0..=(n - 2) / ARITY).rev() {
            self.sift_down(i);
        }
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

    /// Random pushes, pops, skips and sweeps against a sorted list of (time, seq).
    #[test]
    fn pops_in_time_then_push_order_under_random_operations() {
        let mut q = EventQueue::new();
        let mut model: Vec<(Time, u64, u32)> = Vec::new();
        let mut seq = 0;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rand = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut now = 0;
        for step in 0..20_000u32 {
            match rand(10) {
                0..=4 => {
                    let t = now + rand(50);
                    q.push(t, step);
                    model.push((t, seq, step));
                    seq += 1;
                }
                5..=7 => {
                    now += rand(5);
                    model.sort();
                    let want = model.first().filter(|e| e.0 <= now).copied();
                    if want.is_some() {
                        model.remove(0);
                    }
                    assert_eq!(q.pop_due(now), want.map(|e| (e.0, e.2)));
                }
                8 => {
                    let m = rand(7) as u32 + 2;
                    q.skip(|&e| e % m == 0);
                    model.sort();
                    while model.first().is_some_and(|e| e.2 % m == 0) {
                        model.remove(0);
                    }
                }
                _ => {
                    let m = rand(5) as u32 + 2;
                    q.retain(|&e| e % m != 1);
                    model.retain(|e| e.2 % m != 1);
                }
            }
            assert_eq!(q.len(), model.len());
            model.sort();
            assert_eq!(q.peek(), model.first().map(|e| (e.0, &e.2)));
        }
    }
}
