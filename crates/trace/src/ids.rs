//! Job ids must be unique within a trace: the simulator's per-job outputs, the
//! scheduler's records and every report key on them, so a repeated id would merge or
//! overwrite two jobs. Every reader passes each job through [`Ids`].

use crate::TraceError;
use apiary_model::Job;
use foldhash::fast::FixedState;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;

/// No further job under the same hash.
const END: usize = usize::MAX;

/// The ids seen so far, as indexes into the reader's own job list (kept in file order
/// while it reads): copying every id into a set of its own was a tenth of reading a
/// million-row trace.
pub(crate) struct Ids<S = FixedState> {
    /// The column (or JSON field) holding ids, for error messages.
    field: &'static str,
    // Lookups only: iteration order never decides anything. A fixed-seed fast hash.
    hasher: S,
    /// The first job under each id hash.
    first: HashMap<u64, usize, FixedState>,
    /// Per job: the next job under the same hash, and the job's line.
    chain: Vec<(usize, u64)>,
}

impl Ids {
    pub(crate) fn new(field: &'static str) -> Ids {
        Ids::with_hasher(field, FixedState::default())
    }
}

impl<S: BuildHasher> Ids<S> {
    fn with_hasher(field: &'static str, hasher: S) -> Ids<S> {
        Ids {
            field,
            hasher,
            first: HashMap::with_hasher(FixedState::default()),
            chain: Vec::new(),
        }
    }

    /// Records the id of the job about to become `jobs`' next, refusing an empty or
    /// repeated one. `jobs` must hold exactly the jobs this has accepted, in order.
    pub(crate) fn check(
        &mut self,
        file: &str,
        line: u64,
        id: &str,
        jobs: &[Job],
    ) -> Result<(), TraceError> {
        let err = |message: String| TraceError::Row {
            file: file.to_string(),
            line,
            field: self.field.to_string(),
            message,
        };
        if id.is_empty() {
            return Err(err("empty job id".into()));
        }
        let next = jobs.len();
        match self.first.entry(self.hasher.hash_one(id)) {
            Entry::Vacant(v) => {
                v.insert(next);
            }
            Entry::Occupied(o) => {
                let mut i = *o.get();
                loop {
                    let (after, first) = self.chain[i];
                    if jobs.get(i).is_some_and(|j| j.id == id) {
                        return Err(err(format!(
                            "job id '{id}' repeats the job on line {first}; ids must be unique"
                        )));
                    }
                    if after == END {
                        break;
                    }
                    i = after;
                }
                self.chain[i].0 = next;
            }
        }
        self.chain.push((END, line));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `ids` as a reader would: each accepted one becomes the next job.
    fn read<S: BuildHasher>(mut ids: Ids<S>, names: &[&str]) -> (Vec<String>, Vec<String>) {
        let (mut jobs, mut errors) = (Vec::new(), Vec::new());
        for (line, id) in (1..).zip(names) {
            match ids.check("t.csv", line, id, &jobs) {
                Ok(()) => jobs.push(Job::new(*id, 0, 1, 1)),
                Err(e) => errors.push(e.to_string()),
            }
        }
        (
            jobs.into_iter().map(|j| j.id.into_string()).collect(),
            errors,
        )
    }

    /// Every id hashes alike: the chain of jobs under one hash decides.
    struct Collide;
    impl BuildHasher for Collide {
        type Hasher = Constant;
        fn build_hasher(&self) -> Constant {
            Constant
        }
    }
    struct Constant;
    impl std::hash::Hasher for Constant {
        fn finish(&self) -> u64 {
            7
        }
        fn write(&mut self, _: &[u8]) {}
    }

    #[test]
    fn repeats_and_empty_ids_are_refused_naming_the_first_line() {
        let names = ["a", "b", "a", "", "c", "b", "d", "c"];
        let want_jobs = ["a", "b", "c", "d"];
        let want_errors = [
            "t.csv, line 3, field 'id': job id 'a' repeats the job on line 1; ids must be unique",
            "t.csv, line 4, field 'id': empty job id",
            "t.csv, line 6, field 'id': job id 'b' repeats the job on line 2; ids must be unique",
            "t.csv, line 8, field 'id': job id 'c' repeats the job on line 5; ids must be unique",
        ];
        for (jobs, errors) in [
            read(Ids::new("id"), &names),
            read(Ids::with_hasher("id", Collide), &names),
        ] {
            assert_eq!(jobs, want_jobs);
            assert_eq!(errors, want_errors);
        }
        let many: Vec<String> = (0..20_000).map(|i| format!("job-{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(read(Ids::new("id"), &many).0.len(), 20_000);
    }
}
