//! Go's `sort.Stable`, reproduced step for step.
//!
//! HiveD re-sorts its persistent node views with a comparator that is not a strict weak
//! order (two unhealthy nodes compare "less" both ways), so the resulting order depends on
//! the exact sequence of comparisons and swaps Go performs. Node order persists between
//! calls and decides placements, so parity with upstream needs the same algorithm:
//! insertion sort on blocks of 20, then `symMerge` passes of doubling width.

/// Sorts `v` as Go's `sort.Stable(data)` would, with `less(a, b)` as `data.Less`.
pub(crate) fn stable<T>(v: &mut [T], less: &mut impl FnMut(&T, &T) -> bool) {
    let n = v.len();
    let mut block = 20;
    let (mut a, mut b) = (0, block);
    while b <= n {
        insertion(v, a, b, less);
        a = b;
        b += block;
    }
    insertion(v, a, n, less);
    while block < n {
        a = 0;
        b = 2 * block;
        while b <= n {
            sym_merge(v, a, a + block, b, less);
            a = b;
            b += 2 * block;
        }
        let m = a + block;
        if m < n {
            sym_merge(v, a, m, n, less);
        }
        block *= 2;
    }
}

fn insertion<T>(v: &mut [T], a: usize, b: usize, less: &mut impl FnMut(&T, &T) -> bool) {
    for i in a + 1..b {
        let mut j = i;
        while j > a && less(&v[j], &v[j - 1]) {
            v.swap(j, j - 1);
            j -= 1;
        }
    }
}

fn sym_merge<T>(v: &mut [T], a: usize, m: usize, b: usize, less: &mut impl FnMut(&T, &T) -> bool) {
    if m - a == 1 {
        let (mut i, mut j) = (m, b);
        while i < j {
            let h = (i + j) / 2;
            if less(&v[h], &v[a]) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        let mut k = a;
        while k + 1 < i {
            v.swap(k, k + 1);
            k += 1;
        }
        return;
    }
    if b - m == 1 {
        let (mut i, mut j) = (a, m);
        while i < j {
            let h = (i + j) / 2;
            if !less(&v[m], &v[h]) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        let mut k = m;
        while k > i {
            v.swap(k, k - 1);
            k -= 1;
        }
        return;
    }
    let mid = (a + b) / 2;
    let n = mid + m;
    let (mut start, mut r) = if m > mid { (n - b, mid) } else { (a, m) };
    let p = n - 1;
    while start < r {
        let c = (start + r) / 2;
        if !less(&v[p - c], &v[c]) {
            start = c + 1;
        } else {
            r = c;
        }
    }
    let end = n - start;
    if start < m && m < end {
        rotate(v, start, m, end);
    }
    if a < start && start < mid {
        sym_merge(v, a, start, mid, less);
    }
    if mid < end && end < b {
        sym_merge(v, mid, end, b, less);
    }
}

fn rotate<T>(v: &mut [T], a: usize, m: usize, b: usize) {
    let mut i = m - a;
    let mut j = b - m;
    while i != j {
        if i > j {
            swap_range(v, m - i, m, j);
            i -= j;
        } else {
            swap_range(v, m - i, m + j - i, i);
            j -= i;
        }
    }
    swap_range(v, m - i, m, i);
}

fn swap_range<T>(v: &mut [T], a: usize, b: usize, n: usize) {
    for i in 0..n {
        v.swap(a + i, b + i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn consistent_comparator_gives_a_stable_sort(v in proptest::collection::vec((0u8..5, 0u16..1000), 0..200)) {
            let mut ours = v.clone();
            stable(&mut ours, &mut |a, b| a.0 < b.0);
            let mut std = v.clone();
            std.sort_by_key(|x| x.0);
            prop_assert_eq!(ours, std);
        }
    }

    #[test]
    fn inconsistent_comparator_matches_go() {
        // Go: sort.Stable over [b1 b2 b3] where Less(i, j) = !ok[j] gives [b3 b2 b1]
        // (each insertion step swaps because the left element is "not ok").
        let mut v = vec![(false, 1), (false, 2), (false, 3)];
        stable(&mut v, &mut |_, b| !b.0);
        assert_eq!(v, vec![(false, 3), (false, 2), (false, 1)]);
    }
}
