//! The default backend: one redb file. redb is ACID with one writer at a time; a write
//! transaction committed with `Durability::Immediate` is on disk when `commit` returns,
//! and a crash at any moment leaves the last committed state.
//!
//! redb guards its own pages, not what a disk or a person does to the file: every value
//! carries a CRC-32 of its key, revisions and bytes, checked on every read, so a record
//! rewritten in place is reported as corrupt rather than believed. Opening runs redb's
//! integrity check and reads every record once, and a panic inside redb on a damaged
//! file becomes an error naming the file.

use crate::{Compare, Kv, Op, StoreError, Txn, TxnOutcome};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Values are `create_revision` and `mod_revision` (u64 little-endian), the CRC-32 of
/// key, revisions and bytes (u32 little-endian), then the bytes.
const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const REVISION: &str = "revision";
/// The value layout: absent in files written before checksums (migrated on open).
const FORMAT: &str = "format";
const FORMAT_CHECKSUMMED: u64 = 2;
const HEADER: usize = 20;
const OLD_HEADER: usize = 16;

fn checksum(key: &str, create: u64, modified: u64, value: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(key.as_bytes());
    h.update(&create.to_le_bytes());
    h.update(&modified.to_le_bytes());
    h.update(value);
    h.finalize()
}

fn encode(buf: &mut Vec<u8>, key: &str, create: u64, modified: u64, value: &[u8]) {
    buf.clear();
    buf.extend_from_slice(&create.to_le_bytes());
    buf.extend_from_slice(&modified.to_le_bytes());
    buf.extend_from_slice(&checksum(key, create, modified, value).to_le_bytes());
    buf.extend_from_slice(value);
}

thread_local! {
    /// Set while [`guarded`] runs redb on this thread: a panic there becomes an error,
    /// so the panic hook must not print it (with a backtrace) first.
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Wraps the panic hook, once, so that it stays silent for panics [`guarded`] catches
/// and passes every other panic on to the hook that was there.
fn quiet_guarded_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, turning a panic inside redb into an error naming the file.
fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    quiet_guarded_panics();
    let was = GUARDED.with(|g| g.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(was));
    result.unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        Err(StoreError::Backend {
            location: format!("redb {}", path.display()),
            message: format!("the file is damaged (redb failed reading it: {msg})"),
        })
    })
}

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
    /// Opens the file, creating it (and its tables) if needed; checks redb's integrity
    /// and every record's checksum, and adds checksums to a file written without them.
    pub fn open(path: &Path) -> Result<RedbStore, StoreError> {
        guarded(path, || {
            let mut db = Database::create(path).map_err(|e| backend_at(path, e))?;
            let intact = db.check_integrity().map_err(|e| backend_at(path, e))?;
            if !intact {
                return Err(StoreError::Backend {
                    location: format!("redb {}", path.display()),
                    message: "the file failed redb's integrity check".into(),
                });
            }
            let s = RedbStore {
                db: Arc::new(db),
                path: path.to_path_buf(),
            };
            s.upgrade()?;
            s.range("")?;
            Ok(s)
        })
    }

    /// Creates the tables, and rewrites a file of the old layout with checksums.
    fn upgrade(&self) -> Result<(), StoreError> {
        let w = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut kv = w.open_table(KV).map_err(|e| self.err(e))?;
            let mut meta = w.open_table(META).map_err(|e| self.err(e))?;
            let format = meta
                .get(FORMAT)
                .map_err(|e| self.err(e))?
                .map(|g| g.value());
            match format {
                Some(FORMAT_CHECKSUMMED) => {}
                Some(other) => {
                    return Err(StoreError::Backend {
                        location: self.location(),
                        message: format!(
                            "value format {other} is newer than this apiary reads ({FORMAT_CHECKSUMMED})"
                        ),
                    });
                }
                None => {
                    let mut old = Vec::new();
                    for item in kv.iter().map_err(|e| self.err(e))? {
                        let (k, v) = item.map_err(|e| self.err(e))?;
                        old.push((k.value().to_string(), v.value().to_vec()));
                    }
                    let mut buf = Vec::new();
                    for (k, raw) in old {
                        if raw.len() < OLD_HEADER {
                            return Err(self.corrupt(&k));
                        }
                        let (create, modified) = (word(&raw, 0), word(&raw, 8));
                        encode(&mut buf, &k, create, modified, &raw[OLD_HEADER..]);
                        kv.insert(k.as_str(), buf.as_slice())
                            .map_err(|e| self.err(e))?;
                    }
                    meta.insert(FORMAT, FORMAT_CHECKSUMMED)
                        .map_err(|e| self.err(e))?;
                }
            }
        }
        w.commit().map_err(|e| self.err(e))
    }

    fn corrupt(&self, key: &str) -> StoreError {
        StoreError::Corrupt {
            location: self.location(),
            key: key.into(),
        }
    }

    pub(crate) fn location(&self) -> String {
        format!("redb {}", self.path.display())
    }

    fn err(&self, e: impl Into<redb::Error>) -> StoreError {
        backend_at(&self.path, e)
    }

    fn decode(&self, key: &str, raw: &[u8]) -> Result<Kv, StoreError> {
        if raw.len() < HEADER {
            return Err(self.corrupt(key));
        }
        let (create, modified) = (word(raw, 0), word(raw, 8));
        let mut sum = [0u8; 4];
        sum.copy_from_slice(&raw[16..20]);
        let value = &raw[HEADER..];
        if u32::from_le_bytes(sum) != checksum(key, create, modified, value) {
            return Err(self.corrupt(key));
        }
        Ok(Kv {
            key: key.into(),
            value: value.to_vec(),
            create_revision: create,
            mod_revision: modified,
        })
    }

    pub(crate) fn get(&self, key: &str) -> Result<Option<Kv>, StoreError> {
        guarded(&self.path, || self.get_unguarded(key))
    }

    fn get_unguarded(&self, key: &str) -> Result<Option<Kv>, StoreError> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(KV).map_err(|e| self.err(e))?;
        match t.get(key).map_err(|e| self.err(e))? {
            None => Ok(None),
            Some(v) => Ok(Some(self.decode(key, v.value())?)),
        }
    }

    pub(crate) fn range(&self, prefix: &str) -> Result<Vec<Kv>, StoreError> {
        guarded(&self.path, || self.range_unguarded(prefix))
    }

    fn range_unguarded(&self, prefix: &str) -> Result<Vec<Kv>, StoreError> {
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
        guarded(&self.path, || self.txn_unguarded(txn))
    }

    fn txn_unguarded(&self, txn: &Txn) -> Result<TxnOutcome, StoreError> {
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
                        encode(&mut buf, k, create, revision, v);
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

fn word(raw: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&raw[at..at + 8]);
    u64::from_le_bytes(b)
}

fn backend_at(path: &Path, e: impl Into<redb::Error>) -> StoreError {
    StoreError::Backend {
        location: format!("redb {}", path.display()),
        message: e.into().to_string(),
    }
}
