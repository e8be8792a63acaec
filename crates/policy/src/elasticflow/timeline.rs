//! ElasticFlow's timelines of free GPUs and their algebra: the step function
//! ([`Steps`]) every plan is written on, a timeline with one job's plan given back
//! ([`without`], [`Fold`]), and where two timelines differ ([`differences`]).

/// A step function of time in seconds: sorted change points, each value holding until
/// the next point and the last one for ever. Used for free GPUs (a timeline) and for a
/// job's GPUs (a plan).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Steps(pub(super) Vec<(i64, u32)>);

impl<const N: usize> From<[(i64, u32); N]> for Steps {
    fn from(points: [(i64, u32); N]) -> Steps {
        let mut v = points.to_vec();
        v.sort_by_key(|p| p.0);
        v.dedup_by_key(|p| p.0);
        Steps(v)
    }
}

impl Steps {
    /// The change points in time order.
    pub fn points(&self) -> &[(i64, u32)] {
        &self.0
    }

    /// Number of change points.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is no change point.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Appends `(t, v)` after the last point unless it repeats the last value
    /// (building a merged step function in time order).
    pub fn push_merged(&mut self, t: i64, v: u32) {
        debug_assert!(self.0.last().is_none_or(|p| p.0 < t));
        if self.0.last().is_none_or(|p| p.1 != v) {
            self.0.push((t, v));
        }
    }

    /// Removes every point.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// The index of the first point at or after `t`.
    pub(super) fn lower(&self, t: i64) -> usize {
        self.0.partition_point(|p| p.0 < t)
    }

    /// The value set at exactly `t`.
    pub fn get(&self, t: i64) -> Option<u32> {
        let i = self.lower(t);
        self.0.get(i).filter(|p| p.0 == t).map(|p| p.1)
    }

    /// Whether `t` is a change point.
    pub fn contains(&self, t: i64) -> bool {
        self.get(t).is_some()
    }

    /// Sets the value at `t`, adding the point if it is new.
    pub fn insert(&mut self, t: i64, v: u32) {
        let i = self.lower(t);
        match self.0.get_mut(i) {
            Some(p) if p.0 == t => p.1 = v,
            _ => self.0.insert(i, (t, v)),
        }
    }

    /// Adds the point `t` with `v` unless it is one already.
    pub(super) fn insert_absent(&mut self, t: i64, v: u32) {
        let i = self.lower(t);
        if self.0.get(i).is_none_or(|p| p.0 != t) {
            self.0.insert(i, (t, v));
        }
    }

    /// The value of the last point before `t`.
    pub fn value_before(&self, t: i64) -> Option<u32> {
        self.lower(t).checked_sub(1).map(|i| self.0[i].1)
    }

    /// The value in force at `t` (its last point at or before `t`).
    pub fn value_at(&self, t: i64) -> Option<u32> {
        self.value_before(t.saturating_add(1))
    }

    /// The points in `[from, to)`.
    pub fn range(&self, from: i64, to: i64) -> &[(i64, u32)] {
        let lo = self.lower(from);
        let hi = self.lower(to).max(lo);
        &self.0[lo..hi]
    }

    pub(super) fn sub(&mut self, t: i64, n: u32) {
        let i = self.lower(t);
        if let Some(p) = self.0.get_mut(i).filter(|p| p.0 == t) {
            p.1 = p.1.saturating_sub(n);
        }
    }

    /// `merge_dict`: drops points that repeat the value before them.
    pub fn merge(&mut self) {
        let mut last: Option<u32> = None;
        self.0.retain(|&(_, v)| {
            let keep = last != Some(v);
            last = Some(v);
            keep
        });
    }

    /// Adds a zero at every point of `keys` (sorted) that is not a point yet, by one
    /// merge through `spare`.
    pub(super) fn fill_zeros(&mut self, keys: &[(i64, u32)], spare: &mut Vec<(i64, u32)>) {
        spare.clear();
        let (mut a, mut b) = (0, 0);
        while a < self.0.len() || b < keys.len() {
            let next_own = self.0.get(a).map(|p| p.0);
            let next_key = keys.get(b).map(|p| p.0);
            match (next_own, next_key) {
                (Some(x), Some(y)) if x == y => {
                    spare.push(self.0[a]);
                    a += 1;
                    b += 1;
                }
                (Some(x), Some(y)) if x < y => {
                    spare.push(self.0[a]);
                    a += 1;
                }
                (Some(_), None) => {
                    spare.push(self.0[a]);
                    a += 1;
                }
                (_, Some(y)) => {
                    spare.push((y, 0));
                    b += 1;
                }
                (None, None) => break,
            }
        }
        std::mem::swap(&mut self.0, spare);
    }
}

/// The timeline with a job's plan given back (`get_marginal`'s `tmp_future_free_gpus`),
/// in one merge pass: every point of the timeline, of the plan and the plan's end, each
/// valued as the artifact's point-by-point updates leave it (the timeline's value there
/// plus the plan's GPUs there, before `end`), equal neighbours merged. Stops after the
/// first point past `limit` (pass `i64::MAX` for the whole timeline): what comes before
/// it does not depend on what follows.
///
/// Between two of the plan's points the added GPUs are fixed ([`Fold`]), so each point
/// costs O(1). From `end` on the value is the timeline's, so the rest is a copy.
pub(super) fn without(
    tl: &Steps,
    allocs: &Steps,
    end: i64,
    total: u32,
    limit: i64,
    out: &mut Steps,
) {
    let (tl, allocs) = (tl.points(), allocs.points());
    out.clear();
    let past = |out: &Steps| out.points().last().is_some_and(|p| p.0 > limit);
    let (mut i, mut a) = (0usize, 0usize);
    let mut base = total;
    let mut fold = Fold::new(total);
    // Between two of the plan's points the fold is fixed: the timeline's points there
    // only pass through it.
    loop {
        let next_step = allocs.get(a).map_or(i64::MAX, |p| p.0).min(end);
        while let Some(&(t, v)) = tl.get(i).filter(|p| p.0 < next_step) {
            base = v;
            i += 1;
            out.push_merged(t, fold.apply(base));
            if past(out) {
                return;
            }
        }
        if next_step >= end {
            break;
        }
        if let Some(&(_, v)) = tl.get(i).filter(|p| p.0 == next_step) {
            base = v;
            i += 1;
        }
        while let Some(&(_, n)) = allocs.get(a).filter(|p| p.0 <= next_step) {
            fold.push(n);
            a += 1;
        }
        out.push_merged(next_step, fold.apply(base));
        if past(out) {
            return;
        }
    }
    if end == i64::MAX {
        return;
    }
    if tl.get(i).is_some_and(|p| p.0 == end) {
        base = tl[i].1;
        i += 1;
    }
    out.push_merged(end, base);
    for &(t, v) in &tl[i..] {
        if past(out) {
            return;
        }
        out.push_merged(t, v);
    }
}

/// A plan's steps as [`without`] adds them back: each adds the change in the plan, so
/// a point ends with the plan's GPUs there added (`get_marginal` adds without clamping
/// and asserts the sums stay within the cluster; the clamp here only keeps a timeline
/// that did not hold the plan in range).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Fold {
    add: i64,
    total: i64,
}

impl Fold {
    pub(super) fn new(total: u32) -> Fold {
        Fold {
            add: 0,
            total: total as i64,
        }
    }

    /// Then the plan's next step, `n` GPUs.
    pub(super) fn push(&mut self, n: u32) {
        self.add = n as i64;
    }

    pub(super) fn apply(&self, x: u32) -> u32 {
        (x as i64 + self.add).clamp(0, self.total) as u32
    }
}

/// Where two timelines (free GPUs from now on) differ, as `[from, to)` stretches.
pub(super) fn differences(a: &Steps, b: &Steps, out: &mut Vec<(i64, i64)>) {
    out.clear();
    let (a, b) = (a.points(), b.points());
    let (mut i, mut k) = (0usize, 0usize);
    let (mut va, mut vb) = (None, None);
    let mut open: Option<i64> = None;
    loop {
        let t = a
            .get(i)
            .map_or(i64::MAX, |p| p.0)
            .min(b.get(k).map_or(i64::MAX, |p| p.0));
        if t == i64::MAX {
            break;
        }
        if a.get(i).is_some_and(|p| p.0 == t) {
            va = Some(a[i].1);
            i += 1;
        }
        if b.get(k).is_some_and(|p| p.0 == t) {
            vb = Some(b[k].1);
            k += 1;
        }
        match (open, va != vb) {
            (None, true) => open = Some(t),
            (Some(from), false) => {
                out.push((from, t));
                open = None;
            }
            _ => {}
        }
    }
    if let Some(from) = open {
        out.push((from, i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The timeline with a plan given back, point by point as the artifact builds it:
    /// the reference [`without`] must match.
    fn without_by_points(tl: &Steps, allocs: &Steps, end: i64, total: u32) -> Steps {
        let mut tmp = tl.clone();
        if !tmp.contains(end) {
            let v = tmp.value_before(end).unwrap_or(total);
            tmp.insert(end, v);
        }
        // Sums may leave 0..=total while steps are added (the artifact asserts only
        // its final sums), so they are kept wide and clamped at the end.
        let mut points: Vec<(i64, i64)> =
            tmp.points().iter().map(|&(t, v)| (t, v as i64)).collect();
        let mut last = 0i64;
        for &(at, n) in allocs.points() {
            if let Err(k) = points.binary_search_by_key(&at, |p| p.0) {
                let v = if k == 0 {
                    total as i64
                } else {
                    points[k - 1].1
                };
                points.insert(k, (at, v));
            }
            for p in points.iter_mut().filter(|p| p.0 >= at && p.0 < end.max(at)) {
                p.1 += n as i64 - last;
            }
            last = n as i64;
        }
        let mut tmp = Steps::default();
        for (t, v) in points {
            tmp.insert(t, v.clamp(0, total as i64) as u32);
        }
        tmp.merge();
        tmp
    }

    #[test]
    fn without_gives_a_plan_back_as_the_artifact_does() {
        let tl = Steps::from([(0, 2), (300, 4), (600, 8)]);
        let plan = Steps::from([(0, 4), (300, 2)]);
        let mut out = Steps::default();
        without(&tl, &plan, 600, 8, i64::MAX, &mut out);
        assert_eq!(out, Steps::from([(0, 6), (600, 8)]));
        // No step is clamped on its own (`get_marginal` adds the changes and asserts
        // only the sums): 7 + 2 - 2 leaves 7, where clamping each would leave 6.
        without(
            &Steps::from([(0, 7)]),
            &Steps::from([(0, 2), (100, 0)]),
            200,
            8,
            i64::MAX,
            &mut out,
        );
        assert_eq!(out, Steps::from([(0, 8), (100, 7)]));
        // Random timelines and plans (a fixed LCG, so the test is reproducible).
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut r = |m: u64| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 33) % m
        };
        for _ in 0..2000 {
            let total = 1 + r(16) as u32;
            let mut tl = Steps::default();
            let mut t = 0;
            for _ in 0..r(8) {
                tl.insert(t, r(total as u64 + 1) as u32);
                t += 1 + r(5) as i64 * 60;
            }
            let mut plan = Steps::default();
            let mut t = r(3) as i64 * 60;
            for _ in 0..r(5) {
                plan.insert(t, r(total as u64 + 1) as u32);
                t += 1 + r(4) as i64 * 60;
            }
            let end = r(20) as i64 * 60;
            without(&tl, &plan, end, total, i64::MAX, &mut out);
            let full = without_by_points(&tl, &plan, end, total);
            assert_eq!(out, full, "{tl:?} {plan:?} {end}");
            // Cut after the first point past a limit: a prefix of the whole.
            let limit = r(20) as i64 * 60;
            without(&tl, &plan, end, total, limit, &mut out);
            let keep = full.points().partition_point(|p| p.0 <= limit) + 1;
            assert_eq!(out.points(), &full.points()[..keep.min(full.len())]);
        }
    }
}
