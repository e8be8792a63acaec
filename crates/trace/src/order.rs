//! Putting a trace's jobs in submission order, ties in file order (as a stable sort
//! would), and for traces of wall-clock dates starting the clock at the first
//! submission. Reading a shuffled trace such as Philly spends about two fifths of its
//! time here, on one core, so the jobs (168 bytes each) are moved once, along the
//! permutation's cycles, and only integer keys are sorted, by radix.

use apiary_model::{Job, Time};

/// Orders `jobs` by submission time, ties in file order. Traces already in order are
/// only checked.
pub(crate) fn sort_by_submit(jobs: &mut [Job]) {
    sort(jobs, false);
}

/// Orders `jobs` as [`sort_by_submit`] does, then subtracts the first submission time
/// from every job's (Philly's times are dates). The subtraction is made as each job
/// reaches its place, instead of in two more passes over the list (finding the
/// earliest, then subtracting), which took a sixth of the sort's time on Philly.
pub(crate) fn sort_by_submit_from_first(jobs: &mut [Job]) {
    sort(jobs, true);
}

fn sort(jobs: &mut [Job], rebase: bool) {
    let Some(first) = jobs.first() else {
        return;
    };
    let (min, max, sorted) = range(jobs.iter().map(|j| j.submit), first.submit);
    let shift = if rebase { min } else { 0 };
    if sorted {
        return shift_back(jobs, shift);
    }
    // (time since the earliest, index) packed in one word when both fit (every trace
    // apiary has seen): sorting plain integers is faster than sorting pairs, and the
    // order is the same since the indices are distinct.
    let bits = usize::BITS - jobs.len().leading_zeros();
    let mut order: Vec<u64> = if (max - min).leading_zeros() >= bits {
        let mut keys: Vec<u64> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| ((j.submit - min) << bits) | i as u64)
            .collect();
        radix_sort_above(&mut keys, bits);
        let mask = (1u64 << bits) - 1;
        for k in keys.iter_mut() {
            *k &= mask;
        }
        keys
    } else {
        let mut pairs: Vec<(Time, u64)> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.submit, i as u64))
            .collect();
        pairs.sort_unstable();
        pairs.into_iter().map(|(_, i)| i).collect()
    };
    permute(jobs, &mut order, shift);
}

/// One piece of a list, sorted by submission on the thread that parsed it, so that
/// the sort's larger part runs on every core and what is left on one is a merge of
/// integers. Each key is (time − `base`) << `bits` | the job's position in its piece.
pub(crate) struct Run {
    keys: Vec<u64>,
    base: Time,
    bits: u32,
    /// Whether the piece was in submission order already.
    in_order: bool,
}

impl Run {
    /// A piece's order from its jobs' submission times, in list order: ties keep that
    /// order. `None` when the times span too much to pack beside the positions (then
    /// the whole list is sorted at the end instead).
    pub(crate) fn of_times(mut times: Vec<Time>) -> Option<Run> {
        let Some(&first) = times.first() else {
            return Some(Run {
                keys: times,
                base: 0,
                bits: 0,
                in_order: true,
            });
        };
        let (min, max, in_order) = range(times.iter().copied(), first);
        let bits = usize::BITS - times.len().leading_zeros();
        if (max - min).leading_zeros() < bits {
            return None;
        }
        for (i, t) in times.iter_mut().enumerate() {
            *t = ((*t - min) << bits) | i as u64;
        }
        if !in_order {
            radix_sort_above(&mut times, bits);
        }
        Some(Run {
            keys: times,
            base: min,
            bits,
            in_order,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    fn time(&self, key: u64) -> Time {
        (key >> self.bits) + self.base
    }

    fn position(&self, key: u64) -> usize {
        (key & ((1u64 << self.bits) - 1)) as usize
    }
}

/// Orders `jobs` as [`sort_by_submit`] or [`sort_by_submit_from_first`] (`rebase`)
/// does, given `runs`: each piece of the list (from its offset, in list order) sorted
/// already. Runs that do not cover the list exactly are ignored, and the list is
/// sorted whole.
pub(crate) fn sort_runs_by_submit(jobs: &mut [Job], runs: Vec<(usize, Run)>, rebase: bool) {
    let mut end = 0;
    for (offset, run) in &runs {
        if *offset != end {
            return sort(jobs, rebase);
        }
        end += run.keys.len();
    }
    let runs: Vec<(usize, Run)> = runs
        .into_iter()
        .filter(|(_, r)| !r.keys.is_empty())
        .collect();
    if end != jobs.len() || runs.is_empty() {
        return sort(jobs, rebase);
    }
    let first = |r: &Run| r.time(r.keys[0]);
    let last = |r: &Run| r.time(r.keys[r.keys.len() - 1]);
    let min = runs.iter().map(|(_, r)| first(r)).min().unwrap_or(0);
    let max = runs.iter().map(|(_, r)| last(r)).max().unwrap_or(0);
    let shift = if rebase { min } else { 0 };
    let in_order = runs.iter().all(|(_, r)| r.in_order)
        && runs.windows(2).all(|w| last(&w[0].1) <= first(&w[1].1));
    if in_order {
        return shift_back(jobs, shift);
    }
    let bits = usize::BITS - jobs.len().leading_zeros();
    if (max - min).leading_zeros() < bits {
        return sort(jobs, rebase);
    }
    // Each run's keys in the list's terms: the order within a run is unchanged, so
    // merging the runs sorts the whole.
    let mut lists: Vec<Vec<u64>> = runs
        .into_iter()
        .map(|(offset, mut run)| {
            let mut keys = std::mem::take(&mut run.keys);
            for k in keys.iter_mut() {
                let (t, at) = (run.time(*k), run.position(*k));
                *k = ((t - min) << bits) | (offset + at) as u64;
            }
            keys
        })
        .collect();
    while lists.len() > 1 {
        let mut next = Vec::with_capacity(lists.len().div_ceil(2));
        let mut it = lists.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => merge(&a, &b),
                None => a,
            });
        }
        lists = next;
    }
    let mut order = lists.pop().unwrap_or_default();
    let mask = (1u64 << bits) - 1;
    for k in order.iter_mut() {
        *k &= mask;
    }
    permute(jobs, &mut order, shift);
}

/// Subtracts `shift` from every job's submission, for a list already in order.
fn shift_back(jobs: &mut [Job], shift: Time) {
    if shift > 0 {
        for j in jobs.iter_mut() {
            j.submit -= shift;
        }
    }
}

/// The earliest and latest of `times` (whose first is `first`), and whether they are
/// in order, in one pass.
fn range(times: impl Iterator<Item = Time>, first: Time) -> (Time, Time, bool) {
    let (mut min, mut max, mut sorted, mut prev) = (first, first, true, first);
    for s in times {
        sorted &= prev <= s;
        prev = s;
        min = min.min(s);
        max = max.max(s);
    }
    (min, max, sorted)
}

/// Two ascending lists of distinct keys as one.
fn merge(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] < b[j] {
            out.push(a[i]);
            i += 1;
        } else {
            out.push(b[j]);
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// Bits of the key sorted per pass: 2,048 counters, which stay in the first-level
/// cache, and three passes for Philly's 33 bits of time.
const DIGIT: u32 = 11;

/// Sorts keys by their bits above the lowest `skip`, stably, least significant digit
/// first. Only digits that some key has set are sorted, and a pass whose digit is the
/// same in every key is skipped.
///
/// Keys that carry their list position in the low bits are in order of those bits
/// already, so a stable sort of the bits above leaves them the order a sort of the
/// whole key gives, without the passes over the position's bits: consecutive keys
/// share those digits, and each pass's counts then wait on one another.
fn radix_sort_above(keys: &mut [u64], skip: u32) {
    const BUCKETS: usize = 1 << DIGIT;
    const MASK: u64 = BUCKETS as u64 - 1;
    let n = keys.len();
    if n < 512 {
        keys.sort_by_key(|&k| k.checked_shr(skip).unwrap_or(0));
        return;
    }
    let top = keys.iter().fold(0, |a, &k| a | k);
    let passes = (u64::BITS - top.leading_zeros())
        .saturating_sub(skip)
        .div_ceil(DIGIT) as usize;
    let shift_of = |p: usize| skip + p as u32 * DIGIT;
    // Every pass's counts from one read of the keys.
    let mut counts = vec![[0usize; BUCKETS]; passes];
    for &k in keys.iter() {
        for (p, c) in counts.iter_mut().enumerate() {
            c[((k >> shift_of(p)) & MASK) as usize] += 1;
        }
    }
    let mut scratch = vec![0u64; n];
    let mut from: &mut [u64] = keys;
    let mut to: &mut [u64] = &mut scratch;
    let mut moved = false;
    for (p, c) in counts.iter_mut().enumerate() {
        let shift = shift_of(p);
        if c[((from[0] >> shift) & MASK) as usize] == n {
            continue;
        }
        let mut at = 0;
        for slot in c.iter_mut() {
            let count = *slot;
            *slot = at;
            at += count;
        }
        for &k in from.iter() {
            let slot = &mut c[((k >> shift) & MASK) as usize];
            to[*slot] = k;
            *slot += 1;
        }
        std::mem::swap(&mut from, &mut to);
        moved = !moved;
    }
    if moved {
        // `from` is the scratch list and `to` the caller's.
        to.copy_from_slice(from);
    }
}

/// Puts `jobs[order[k]]` at `k` for every `k`, in place along the permutation's cycles,
/// and subtracts `shift` from each job's submission as it reaches its place. Moving
/// the jobs into a second list instead touches a fresh list the trace's size, and on
/// Philly its page faults were half of reading.
///
/// A shuffled trace's cycles jump across the whole list, so nearly every job moved is
/// a cache miss. The walk reads each job a few steps before it moves it (`AHEAD`), so
/// those misses overlap instead of coming one after another (about 8 % of reading
/// Philly).
fn permute(jobs: &mut [Job], order: &mut [u64], shift: Time) {
    const DONE: u64 = u64::MAX;
    const AHEAD: usize = 8;
    for start in 0..order.len() {
        if order[start] == DONE {
            continue;
        }
        // `ahead` runs `AHEAD` steps in front of `k` on the same cycle, whose entries
        // ahead of `k` are not marked yet.
        let mut ahead = order[start] as usize;
        for _ in 0..AHEAD {
            if ahead == start {
                break;
            }
            touch(&jobs[ahead]);
            ahead = order[ahead] as usize;
        }
        let mut k = start;
        // `order` is a permutation: each cycle is followed once, marking its entries.
        while order[k] != DONE {
            let src = std::mem::replace(&mut order[k], DONE) as usize;
            if src == start {
                break;
            }
            if ahead != start {
                touch(&jobs[ahead]);
                ahead = order[ahead] as usize;
            }
            swap(jobs, k, src);
            jobs[k].submit -= shift;
            k = src;
        }
        // The cycle's last place takes the job that was at its start.
        jobs[k].submit -= shift;
    }
}

/// Swaps two distinct jobs through registers: `slice::swap` may be asked to swap an
/// element with itself, so it goes through a copy in memory, three calls to `memcpy`
/// for a 168-byte job.
#[inline(always)]
fn swap(jobs: &mut [Job], a: usize, b: usize) {
    debug_assert_ne!(a, b);
    let (lo, hi) = (a.min(b), a.max(b));
    let (left, right) = jobs.split_at_mut(hi);
    std::mem::swap(&mut left[lo], &mut right[0]);
}

/// Loads a word of a job, so that its memory is on its way when the job is moved.
#[inline(always)]
fn touch(job: &Job) {
    std::hint::black_box(job.submit);
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::rng::Rng;

    #[test]
    fn jobs_sort_by_submit_keeping_file_order_on_ties() {
        let mut rng = Rng::new(3);
        // Small times sort as packed words; times near the top of the range as pairs.
        // Lengths past 512 take the radix path; ranges of a few values leave most of
        // its passes to be skipped.
        for n in [0, 1, 2, 7, 100, 511, 512, 5000, 70_000] {
            for (base, range) in [
                (0, 50),
                (0, 1 << 40),
                (1 << 41, 1 << 33),
                (1 << 57, 50),
                (0, u64::MAX >> 2),
                (7, 1),
            ] {
                for rebase in [false, true] {
                    let mut jobs: Vec<Job> = (0..n)
                        .map(|i| {
                            let t = base + rng.next_u64() % range;
                            Job::new(i.to_string(), t, 1, 1)
                        })
                        .collect();
                    let mut want = jobs.clone();
                    want.sort_by_key(|j| j.submit);
                    if rebase && let Some(min) = want.first().map(|j| j.submit) {
                        want.iter_mut().for_each(|j| j.submit -= min);
                    }
                    sort(&mut jobs, rebase);
                    let key = |v: &[Job]| {
                        v.iter()
                            .map(|j| (j.id.clone(), j.submit))
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(key(&jobs), key(&want), "{n} jobs, range {range}");
                }
            }
        }
    }

    #[test]
    fn sorted_lists_are_only_rebased() {
        let mut jobs: Vec<Job> = (0..600)
            .map(|i| Job::new(i.to_string(), 1_000 + i / 3, 1, 1))
            .collect();
        sort_by_submit_from_first(&mut jobs);
        assert!(
            jobs.iter()
                .enumerate()
                .all(|(i, j)| j.submit == i as u64 / 3)
        );
    }

    #[test]
    fn radix_sort_matches_a_stable_sort_of_the_high_bits() {
        let mut rng = Rng::new(11);
        for n in [0, 5, 600, 2048, 10_000] {
            for bits in [1, 11, 12, 22, 33, 50, 63, 64] {
                for skip in [0, 1, 13, 17, 40, 64] {
                    let keys: Vec<u64> = (0..n).map(|_| rng.next_u64() >> (64 - bits)).collect();
                    let mut want = keys.clone();
                    want.sort_by_key(|&k| k.checked_shr(skip).unwrap_or(0));
                    let mut got = keys;
                    radix_sort_above(&mut got, skip);
                    assert_eq!(got, want, "{n} keys of {bits} bits above {skip}");
                }
            }
        }
    }
}
