//! The default backend: one redb file. redb is ACID with one writer at a time; a write
//! transaction committed with `Durability::Immediate` is on disk when `commit` returns,
//! and a crash at any moment leaves the last committed state.

use crate::{Compare, Kv, Op, StoreError, Txn, TxnOutcome};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Values are `create_revision` and `mod_revision` (u64 little-endian) then the bytes.
const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const REVISION: &str = "revision";
const HEADER: usize = 16;

/// A store in a redb file; clones share the open database.
#[derive(Clone)]
pub struct RedbStore {
    db: Arc<Database>,
    path: PathBuf,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .finish()
    }
}

impl RedbStore {
    /// Opens the file, creating it (and its tables) if needed.
    pub fn open(path: &Path) -> Result<RedbStore, StoreError> {
        let s = RedbStore {
            db: Arc::new(Database::create(path).map_err(|e| backend_at(path, e))?),
            path: path.to_path_buf(),
        };
        let w = s.db.begin_write().map_err(|e| s.err(e))?;
        {
            w.open_table(KV).map_err(|e| s.err(e))?;
            w.open_table(META).map_err(|e| s.err(e))?;
        }
        w.commit().map_err(|e| s.err(e))?;
        Ok(s)
    }

    pub(crate) fn location(&self) -> String {
        format!("redb {}", self.path.display())
    }

    fn err(&self, e: impl Into<redb::Error>) -> StoreError {
        backend_at(&self.path, e)
    }

    fn decode(&self, key: &str, raw: &[u8]) -> Result<Kv, StoreError> {
        if raw.len() < HEADER {
            return Err(StoreError::Corrupt {
                location: self.location(),
                key: key.into(),
            });
        }
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&raw[i..i + 8]);
            u64::from_le_bytes(b)
        };
        Ok(Kv {
            key: key.into(),
            value: raw[HEADER..].to_vec(),
            create_revision: word(0),
            mod_revision: word(8),
        })
    }

    pub(crate) fn get(&self, key: &str) -> Result<Option<Kv>, StoreError> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(KV).map_err(|e| self.err(e))?;
        match t.get(key).map_err(|e| self.err(e))? {
            None => Ok(None),
            Some(v) => Ok(Some(self.decode(key, v.value())?)),
        }
    }

    pub(crate) fn range(&self, prefix: &str) -> Result<Vec<Kv>, StoreError> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(KV).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for item in t.range::<&str>(prefix..).map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let k = k.value();
            if !k.starts_with(prefix) {
                break;
            }
            out.push(self.decode(k, v.value())?);
        }
        Ok(out)
    }

    pub(crate) fn revision(&self) -> Result<u64, StoreError> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(META).map_err(|e| self.err(e))?;
        Ok(t.get(REVISION)
            .map_err(|e| self.err(e))?
            .map_or(0, |g| g.value()))
    }

    pub(crate) fn txn(&self, txn: &Txn) -> Result<TxnOutcome, StoreError> {
        let mut w = self.db.begin_write().map_err(|e| self.err(e))?;
        w.set_durability(Durability::Immediate)
            .map_err(|e| StoreError::Backend {
                location: self.location(),
                message: e.to_string(),
            })?;
        let revision;
        {
            let mut kv = w.open_table(KV).map_err(|e| self.err(e))?;
            let mut meta = w.open_table(META).map_err(|e| self.err(e))?;
            let current = meta
                .get(REVISION)
                .map_err(|e| self.err(e))?
                .map_or(0, |g| g.value());
            for c in &txn.compares {
                let holds = match c {
                    Compare::Absent(k) => kv.get(k.as_str()).map_err(|e| self.err(e))?.is_none(),
                    Compare::ModRevision(k, r) => {
                        match kv.get(k.as_str()).map_err(|e| self.err(e))? {
                            None => false,
                            Some(v) => self.decode(k, v.value())?.mod_revision == *r,
                        }
                    }
                };
                if !holds {
                    // Dropping the uncommitted transaction aborts it.
                    return Ok(TxnOutcome::Conflict { revision: current });
                }
            }
            if txn.ops.is_empty() {
                return Ok(TxnOutcome::Committed { revision: current });
            }
            revision = current + 1;
            let mut buf = Vec::new();
            for op in &txn.ops {
                match op {
                    Op::Put(k, v) => {
                        let create = match kv.get(k.as_str()).map_err(|e| self.err(e))? {
                            Some(old) => self.decode(k, old.value())?.create_revision,
                            None => revision,
                        };
                        buf.clear();
                        buf.extend_from_slice(&create.to_le_bytes());
                        buf.extend_from_slice(&revision.to_le_bytes());
                        buf.extend_from_slice(v);
                        kv.insert(k.as_str(), buf.as_slice())
                            .map_err(|e| self.err(e))?;
                    }
                    Op::Delete(k) => {
                        kv.remove(k.as_str()).map_err(|e| self.err(e))?;
                    }
                }
            }
            meta.insert(REVISION, revision).map_err(|e| self.err(e))?;
        }
        w.commit().map_err(|e| self.err(e))?;
        Ok(TxnOutcome::Committed { revision })
    }
}

fn backend_at(path: &Path, e: impl Into<redb::Error>) -> StoreError {
    StoreError::Backend {
        location: format!("redb {}", path.display()),
        message: e.into().to_string(),
    }
}
