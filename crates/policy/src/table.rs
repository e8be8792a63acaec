//! Per-job tables that grow as jobs arrive without moving what they hold.
//!
//! A policy learns jobs one at a time and may not know how many are to come, so its
//! per-job state grows with the jobs it has been told of ([`crate::Ctx::job_count`]).
//! A `Vec` grown that way copies itself at every doubling and holds up to twice what
//! it needs while it does (on a million-job trace, tens of megabytes copied and held
//! per table); a [`JobTable`] grows by fixed chunks that never move.

use crate::world::JobIdx;

/// Entries per chunk.
const CHUNK: usize = 1024;

/// A table with one entry per job index, growing in chunks.
#[derive(Clone, Debug, Default)]
pub struct JobTable<T> {
    chunks: Vec<Box<[T]>>,
}

impl<T: Clone> JobTable<T> {
    /// An empty table.
    pub fn new() -> JobTable<T> {
        JobTable { chunks: Vec::new() }
    }

    /// Makes entries for job indices below `n`, new ones set to `fill`.
    #[inline]
    pub fn ensure(&mut self, n: usize, fill: T) {
        while self.chunks.len() * CHUNK < n {
            self.chunks
                .push(vec![fill.clone(); CHUNK].into_boxed_slice());
        }
    }

    /// How many entries it has (a whole number of chunks, at least what was ensured).
    pub fn len(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// Whether it has no entry yet.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

impl<T> std::ops::Index<JobIdx> for JobTable<T> {
    type Output = T;
    #[inline]
    fn index(&self, j: JobIdx) -> &T {
        let j = j as usize;
        &self.chunks[j / CHUNK][j % CHUNK]
    }
}

impl<T> std::ops::IndexMut<JobIdx> for JobTable<T> {
    #[inline]
    fn index_mut(&mut self, j: JobIdx) -> &mut T {
        let j = j as usize;
        &mut self.chunks[j / CHUNK][j % CHUNK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_keep_their_values_as_the_table_grows() {
        let mut t = JobTable::new();
        assert!(t.is_empty());
        t.ensure(3, 7u64);
        t[2] = 9;
        t.ensure(5_000, 1);
        assert!(t.len() >= 5_000);
        assert_eq!((t[0], t[2], t[4_999]), (7, 9, 1));
        t.ensure(10, 0);
        assert_eq!(t[2], 9, "ensuring less changes nothing");
    }
}
