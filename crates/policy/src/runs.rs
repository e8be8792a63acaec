//! A stable sort of keyed entries that merges the ascending runs the input already
//! has. Muri sorts its active jobs twice at every event: once coming in as a few long
//! runs (the last pass's order, by GPU count, then priority), and once as one run per
//! GPU count (its admission entries). `std`'s stable sort finds only runs longer than
//! about the square root of the length and quick-sorts the rest, so on those inputs it
//! did three to four times the work of merging the runs.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
