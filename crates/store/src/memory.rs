//! The in-memory backend: the reference semantics, for tests and throwaway servers.

use crate::{Compare, Kv, Op, Txn, TxnOutcome};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Default)]
struct State {
    revision: u64,
    kv: BTreeMap<String, Kv>,
}

/// A store in memory; clones share it.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore(Arc<Mutex<State>>);

impl MemoryStore {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied transaction: writes
        // are applied only after every check, so the data is consistent either way.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, key: &str) -> Option<Kv> {
        self.lock().kv.get(key).cloned()
    }

    pub(crate) fn range(&self, prefix: &str) -> Vec<Kv> {
        self.lock()
            .kv
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub(crate) fn revision(&self) -> u64 {
        self.lock().revision
    }

    pub(crate) fn txn(&self, t: &Txn) -> TxnOutcome {
        let mut s = self.lock();
        let holds = t.compares.iter().all(|c| match c {
            Compare::Absent(k) => !s.kv.contains_key(k),
            Compare::ModRevision(k, r) => s.kv.get(k).is_some_and(|kv| kv.mod_revision == *r),
        });
        if !holds {
            return TxnOutcome::Conflict {
                revision: s.revision,
            };
        }
        if t.ops.is_empty() {
            return TxnOutcome::Committed {
                revision: s.revision,
            };
        }
        let rev = s.revision + 1;
        for op in &t.ops {
            match op {
                Op::Put(k, v) => {
                    let create = s.kv.get(k).map_or(rev, |kv| kv.create_revision);
                    s.kv.insert(
                        k.clone(),
                        Kv {
                            key: k.clone(),
                            value: v.clone(),
                            create_revision: create,
                            mod_revision: rev,
                        },
                    );
                }
                Op::Delete(k) => {
                    s.kv.remove(k);
                }
            }
        }
        s.revision = rev;
        TxnOutcome::Committed { revision: rev }
    }
}
