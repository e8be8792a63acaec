//! Job ids must be unique within a trace: the simulator's per-job outputs, the
//! scheduler's records and every report key on them, so a repeated id would merge or
//! overwrite two jobs. Every reader passes each job through [`Ids`].

use crate::TraceError;
use foldhash::fast::FixedState;
use std::collections::HashMap;

/// The ids seen so far and the line each was first seen on.
pub(crate) struct Ids {
    /// The column (or JSON field) holding ids, for error messages.
    field: &'static str,
    // Lookups only: iteration order never decides anything. A fixed-seed fast hash:
    // SipHash was a sixth of reading a million-row trace.
    seen: HashMap<Box<str>, u64, FixedState>,
}

impl Ids {
    pub(crate) fn new(field: &'static str) -> Ids {
        Ids {
            field,
            seen: HashMap::with_hasher(FixedState::default()),
        }
    }

    /// Records a job's id, refusing an empty or repeated one.
    pub(crate) fn check(&mut self, file: &str, line: u64, id: &str) -> Result<(), TraceError> {
        let err = |message: String| TraceError::Row {
            file: file.to_string(),
            line,
            field: self.field.to_string(),
            message,
        };
        if id.is_empty() {
            return Err(err("empty job id".into()));
        }
        if let Some(first) = self.seen.get(id) {
            return Err(err(format!(
                "job id '{id}' repeats the job on line {first}; ids must be unique"
            )));
        }
        self.seen.insert(id.into(), line);
        Ok(())
    }
}
