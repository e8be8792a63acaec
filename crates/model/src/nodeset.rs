//! A set of node indexes kept as a bitset, for the placement index's buckets: insert
//! and remove are a bit flip (a B-tree set did an allocation-prone search for each,
//! and every start and finish moves a node between buckets), and iteration and the
//! first member come in node order, as placement needs them.

/// Node indexes in `0..capacity`, iterated in increasing order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSet {
    words: Vec<u64>,
    len: usize,
    /// The word of the smallest member, while there is one: every word below it is
    /// zero and it is not, so the first member is one lookup (placement asks each
    /// bucket above a job's size for it at every start).
    lowest: usize,
}

impl NodeSet {
    /// The empty set (a constant, for a bucket that does not exist).
    pub const EMPTY: NodeSet = NodeSet {
        words: Vec::new(),
        len: 0,
        lowest: 0,
    };

    /// An empty set able to hold nodes `0..nodes`; larger indexes grow it.
    pub fn with_capacity(nodes: usize) -> NodeSet {
        NodeSet {
            words: vec![0; nodes.div_ceil(64)],
            len: 0,
            lowest: 0,
        }
    }

    /// Adds `n`; false if it was already there.
    #[inline]
    pub fn insert(&mut self, n: u32) -> bool {
        let (w, bit) = (n as usize / 64, 1u64 << (n % 64));
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        if self.words[w] & bit != 0 {
            return false;
        }
        self.words[w] |= bit;
        if self.len == 0 || w < self.lowest {
            self.lowest = w;
        }
        self.len += 1;
        true
    }

    /// Removes `n`; false if it was not there.
    #[inline]
    pub fn remove(&mut self, n: u32) -> bool {
        let (w, bit) = (n as usize / 64, 1u64 << (n % 64));
        match self.words.get_mut(w) {
            Some(word) if *word & bit != 0 => *word &= !bit,
            _ => return false,
        }
        self.len -= 1;
        if w == self.lowest {
            while self.words.get(self.lowest).is_some_and(|&x| x == 0) {
                self.lowest += 1;
            }
        }
        true
    }

    /// Members `64 * i .. 64 * i + 64` as bits (0 past the words held).
    #[inline]
    pub fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    /// Whether `n` is in the set.
    #[inline]
    pub fn contains(&self, n: u32) -> bool {
        self.words
            .get(n as usize / 64)
            .is_some_and(|&x| x & (1u64 << (n % 64)) != 0)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The smallest member.
    #[inline]
    pub fn first(&self) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let x = self.words.get(self.lowest).copied().unwrap_or(0);
        debug_assert_ne!(x, 0, "the lowest word holds the first member");
        Some((self.lowest * 64) as u32 + x.trailing_zeros())
    }

    /// The members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let from = if self.len == 0 {
            self.words.len()
        } else {
            self.lowest
        };
        self.words
            .iter()
            .enumerate()
            .skip(from)
            .flat_map(|(i, &x)| word_members(i, x))
    }
}

/// The nodes whose bits are set in word `i` of a node bitset (nodes `64 * i ..`), in
/// increasing order.
pub fn word_members(i: usize, word: u64) -> impl Iterator<Item = u32> {
    let base = (i * 64) as u32;
    std::iter::successors((word != 0).then_some(word), |&r| {
        let r = r & (r - 1);
        (r != 0).then_some(r)
    })
    .map(move |r| base + r.trailing_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn behaves_as_an_ordered_set() {
        let mut set = NodeSet::with_capacity(300);
        let mut want = BTreeSet::new();
        let mut x = 11u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Mostly low nodes, some past the initial capacity.
            let n = ((x >> 40) % 400) as u32;
            if (x >> 20) & 1 == 0 {
                assert_eq!(set.insert(n), want.insert(n));
            } else {
                assert_eq!(set.remove(n), want.remove(&n));
            }
            assert_eq!(set.len(), want.len());
            assert_eq!(set.first(), want.first().copied());
            assert_eq!(set.contains(n), want.contains(&n));
        }
        assert!(set.iter().eq(want.iter().copied()));
        for n in want.clone() {
            set.remove(n);
        }
        assert!(set.is_empty() && set.first().is_none() && set.iter().next().is_none());
    }
}
