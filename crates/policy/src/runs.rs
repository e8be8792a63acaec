//! The orders the policies' passes sort by, made cheap: floats as integers in
//! `total_cmp`'s order, a GPU-count order by counting, and a stable sort of keyed
//! entries that merges the ascending runs the input already has.
//!
//! The merge: Muri sorts its active jobs twice at every event, once as they come from
//! the last pass (by GPU count, then priority) and once as one run per GPU count (its
//! admission entries). `std`'s stable sort quick-sorts runs shorter than about the
//! square root of the length; merging them took a fifth fewer instructions on Philly
//! (3.7 G against 4.6 G over the run).

/// Sorts `v` by `.0`, stably (entries with equal keys keep their order), as
/// `v.sort_by_key(|e| e.0)` does. `buf` and `bounds` are scratch space, kept by the
/// caller so that a sort allocates nothing once they have grown.
pub(crate) fn sort_stable_by_key<T: Copy>(
    v: &mut Vec<(u64, T)>,
    buf: &mut Vec<(u64, T)>,
    bounds: &mut Vec<usize>,
) {
    let n = v.len();
    bounds.clear();
    bounds.push(0);
    for i in 1..n {
        if v[i].0 < v[i - 1].0 {
            bounds.push(i);
        }
    }
    bounds.push(n);
    if bounds.len() <= 2 {
        return;
    }
    // Merge neighbouring runs pairwise until one is left, between `v` and `buf`.
    // `buf` only needs the length: every level writes all of it.
    buf.truncate(n);
    if buf.len() < n {
        buf.resize(n, v[0]);
    }
    while bounds.len() > 2 {
        let mut w = 0;
        let mut k = 0;
        while k + 2 < bounds.len() {
            let (lo, mid, hi) = (bounds[k], bounds[k + 1], bounds[k + 2]);
            merge(&v[lo..mid], &v[mid..hi], &mut buf[lo..hi]);
            bounds[w] = lo;
            w += 1;
            k += 2;
        }
        if k + 1 < bounds.len() {
            // An odd run out: carried over as it is.
            let (lo, hi) = (bounds[k], bounds[k + 1]);
            buf[lo..hi].copy_from_slice(&v[lo..hi]);
            bounds[w] = lo;
            w += 1;
        }
        bounds[w] = n;
        bounds.truncate(w + 1);
        std::mem::swap(v, buf);
    }
}

/// Writes the merge of two sorted runs into `out` (as long as both); on equal keys
/// `a`'s entry first, as `a` came first in the input. The runs Muri merges are long,
/// so the branch predicts well: a branch-free choice measured slower.
#[inline]
fn merge<T: Copy>(a: &[(u64, T)], b: &[(u64, T)], out: &mut [(u64, T)]) {
    let (mut i, mut j, mut o) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        if b[j].0 < a[i].0 {
            out[o] = b[j];
            j += 1;
        } else {
            out[o] = a[i];
            i += 1;
        }
        o += 1;
    }
    let rest = if i < a.len() { &a[i..] } else { &b[j..] };
    out[o..].copy_from_slice(rest);
}

/// `x`'s place in [`f64::total_cmp`]'s order, as an unsigned integer: sorts compare
/// these (with an index where a stable sort kept ties in order) instead of calling
/// `total_cmp` at every comparison (Pollux's survival, Muri's and Themis' passes).
pub(crate) fn total_key(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 { !b } else { b | 1 << 63 }
}

/// `jobs` in `out`, stably sorted by their count in `gpus`, largest first: one counting
/// pass and one scatter. The counts are indexed by GPU count while the largest is
/// small against the list (a search of the distinct counts, the common small ones
/// last once sorted, was most of the work); past that, searched.
pub(crate) fn by_gpus_descending(
    jobs: &[crate::world::JobIdx],
    gpus: &[u32],
    out: &mut Vec<crate::world::JobIdx>,
) {
    out.clear();
    out.resize(jobs.len(), 0);
    let largest = jobs.iter().map(|&j| gpus[j as usize]).max().unwrap_or(0) as usize;
    if largest <= 4 * jobs.len() + 64 {
        // Per GPU count: how many, then the next position in `out`.
        let mut at = vec![0usize; largest + 1];
        for &j in jobs {
            at[gpus[j as usize] as usize] += 1;
        }
        let mut next = 0;
        for a in at.iter_mut().rev() {
            (*a, next) = (next, next + *a);
        }
        for &j in jobs {
            let a = &mut at[gpus[j as usize] as usize];
            out[*a] = j;
            *a += 1;
        }
        return;
    }
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for &j in jobs {
        let g = gpus[j as usize];
        match counts.iter_mut().find(|c| c.0 == g) {
            Some(c) => c.1 += 1,
            None => counts.push((g, 1)),
        }
    }
    counts.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
    let mut at = 0;
    for c in &mut counts {
        (c.1, at) = (at, at + c.1);
    }
    for &j in jobs {
        let g = gpus[j as usize];
        if let Some(c) = counts.iter_mut().find(|c| c.0 == g) {
            out[c.1] = j;
            c.1 += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_keys_order_as_total_cmp_does() {
        let mut xs = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            f64::MIN_POSITIVE / 8.0,
            f64::MAX,
            f64::MIN,
        ];
        let mut rng = apiary_model::Rng::new(3);
        xs.extend((0..300).map(|_| f64::from_bits(rng.next_u64())));
        xs.extend((0..300).map(|_| rng.f64() * 200.0 - 100.0));
        for a in &xs {
            for b in &xs {
                assert_eq!(total_key(*a).cmp(&total_key(*b)), a.total_cmp(b), "{a} {b}");
            }
        }
    }

    /// The same order as `std`'s stable sort on random keys, on keys with many ties,
    /// on sorted, reversed and run-structured inputs, and on the lengths around 0-3.
    #[test]
    fn sorts_as_the_std_stable_sort() {
        let mut x = 7u64;
        let mut next = move || {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x >> 11
        };
        let (mut buf, mut bounds) = (Vec::new(), Vec::new());
        let mut cases = 0;
        for len in [0usize, 1, 2, 3, 4, 5, 17, 64, 237, 1000] {
            for shape in 0..6 {
                let mut v: Vec<(u64, u32)> = (0..len as u32)
                    .map(|i| {
                        let r = next();
                        let k = match shape {
                            0 => r,
                            1 => r % 4,
                            2 => i as u64,
                            3 => (len as u64) - i as u64,
                            // Runs of a few lengths, as Muri's lists come in.
                            4 => (i as u64 % 40) * 3 + r % 3,
                            _ => u64::MAX - r % 2,
                        };
                        (k, i)
                    })
                    .collect();
                let mut want = v.clone();
                want.sort_by_key(|e| e.0);
                sort_stable_by_key(&mut v, &mut buf, &mut bounds);
                assert_eq!(v, want, "length {len}, shape {shape}");
                cases += 1;
            }
        }
        assert_eq!(cases, 60);
    }

    /// The counting sort by GPU count gives what a stable sort gives.
    #[test]
    fn gpu_count_order_is_the_stable_sort() {
        // Small counts (the table) and counts past it (the search).
        let small = [1u32, 2, 4, 8, 16, 3, 64];
        let wide = [1u32, 8, 5000, 2, 100_000];
        let mut x = 5u64;
        for sizes in [&small[..], &wide[..]] {
            for len in [0usize, 1, 2, 7, 100, 1000] {
                let gpus: Vec<u32> = (0..len)
                    .map(|_| {
                        x = x
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        sizes[(x >> 33) as usize % sizes.len()]
                    })
                    .collect();
                let jobs: Vec<crate::world::JobIdx> =
                    (0..len as crate::world::JobIdx).rev().collect();
                let mut want = jobs.clone();
                want.sort_by_key(|&j| std::cmp::Reverse(gpus[j as usize]));
                let mut got = Vec::new();
                by_gpus_descending(&jobs, &gpus, &mut got);
                assert_eq!(got, want, "{len} jobs of sizes {sizes:?}");
            }
        }
    }
}
