//! The live service's durable state, behind one small etcd-shaped API so that the same
//! server runs on an embedded file (redb, the default), in memory (tests), and on etcd
//! (feature `etcd`) when several replicas share state.
//!
//! The model is etcd's: string keys, byte values, one store-wide *revision* that every
//! committed write transaction advances by one, and per key the revisions that created
//! and last modified it. A [`Txn`] applies its operations atomically if and only if all
//! its [`Compare`]s hold, which is how callers do compare-and-swap without locks. When a
//! write call returns `Ok`, the write is durable (for a persistent backend) — the server
//! acknowledges a submission only after that.
//!
//! The backend set is closed, so [`Store`] is an enum rather than a boxed trait object;
//! blocking backends run on tokio's blocking pool. [`testing`] is the conformance suite
//! every backend's tests run.

mod embedded;
#[cfg(feature = "etcd")]
mod etcd;
mod memory;
pub mod testing;

pub use embedded::RedbStore;
#[cfg(feature = "etcd")]
pub use etcd::{EtcdStore, Leadership};
pub use memory::MemoryStore;

use std::path::Path;

/// Longest key accepted, bytes.
pub const MAX_KEY_BYTES: usize = 4096;
/// Largest value accepted, bytes (records are small JSON documents; this bounds a bad one).
pub const MAX_VALUE_BYTES: usize = 8 << 20;

/// A stored key with its value and revisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    /// The key.
    pub key: String,
    /// The value.
    pub value: Vec<u8>,
    /// Revision of the transaction that created the key (since it last did not exist).
    pub create_revision: u64,
    /// Revision of the transaction that last wrote it.
    pub mod_revision: u64,
}

/// A condition of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compare {
    /// The key does not exist.
    Absent(String),
    /// The key exists and was last written at this revision.
    ModRevision(String, u64),
}

/// A write of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Create or replace a key.
    Put(String, Vec<u8>),
    /// Remove a key (nothing if absent).
    Delete(String),
}

/// Operations applied atomically when every compare holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Txn {
    /// Conditions, all of which must hold.
    pub compares: Vec<Compare>,
    /// Writes, in order.
    pub ops: Vec<Op>,
}

impl Txn {
    /// An empty transaction.
    pub fn new() -> Txn {
        Txn::default()
    }
    /// Adds a condition.
    pub fn when(mut self, c: Compare) -> Txn {
        self.compares.push(c);
        self
    }
    /// Adds a put.
    pub fn put(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Txn {
        self.ops.push(Op::Put(key.into(), value.into()));
        self
    }
    /// Adds a delete.
    pub fn delete(mut self, key: impl Into<String>) -> Txn {
        self.ops.push(Op::Delete(key.into()));
        self
    }

    fn validate(&self) -> Result<(), StoreError> {
        for c in &self.compares {
            match c {
                Compare::Absent(k) | Compare::ModRevision(k, _) => check_key(k)?,
            }
        }
        for o in &self.ops {
            match o {
                Op::Put(k, v) => {
                    check_key(k)?;
                    if v.len() > MAX_VALUE_BYTES {
                        return Err(StoreError::BadValue {
                            key: k.clone(),
                            len: v.len(),
                        });
                    }
                }
                Op::Delete(k) => check_key(k)?,
            }
        }
        Ok(())
    }
}

fn check_key(k: &str) -> Result<(), StoreError> {
    if k.is_empty() || k.len() > MAX_KEY_BYTES {
        return Err(StoreError::BadKey(k.chars().take(64).collect()));
    }
    Ok(())
}

/// What a transaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Every compare held; the writes are applied (durably, for a persistent store) at
    /// this revision (the current one if the transaction wrote nothing).
    Committed {
        /// The store revision after the transaction.
        revision: u64,
    },
    /// A compare failed; nothing changed.
    Conflict {
        /// The store revision the compares were evaluated at.
        revision: u64,
    },
}

impl TxnOutcome {
    /// Whether the writes were applied.
    pub fn committed(self) -> bool {
        matches!(self, TxnOutcome::Committed { .. })
    }
    /// The revision reported.
    pub fn revision(self) -> u64 {
        match self {
            TxnOutcome::Committed { revision } | TxnOutcome::Conflict { revision } => revision,
        }
    }
}

/// Why a store call failed. A failed call changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An empty or over-long key.
    #[error("store key must be 1..={MAX_KEY_BYTES} bytes (got '{0}')")]
    BadKey(String),
    /// An over-large value.
    #[error("store value for '{key}' is {len} bytes; the limit is {MAX_VALUE_BYTES}")]
    BadValue {
        /// The key.
        key: String,
        /// Its length.
        len: usize,
    },
    /// The backend failed (I/O, corruption, a file locked by another process).
    #[error("store {location}: {message}")]
    Backend {
        /// The backend and its file, if any.
        location: String,
        /// The backend's message.
        message: String,
    },
    /// A write of a fenced store whose leadership is gone: another server leads now
    /// (or none does), and nothing was written.
    #[error(
        "store {location}: this server no longer leads ({}), so its write was refused",
        leader.as_deref().map_or("no leader now".to_string(), |l| format!("{l} leads now"))
    )]
    Fenced {
        /// The backend.
        location: String,
        /// Who leads now, if anyone.
        leader: Option<String>,
    },
    /// A stored record could not be decoded or fails its checksum (the file was damaged
    /// or edited in place).
    #[error(
        "store {location}: record '{key}' is corrupt (its checksum or layout does not match: the file was damaged or edited)"
    )]
    Corrupt {
        /// The backend and its file.
        location: String,
        /// The key.
        key: String,
    },
}

/// A store: one of the backends, cheap to clone (clones share the data).
#[derive(Clone, Debug)]
pub enum Store {
    /// In memory; gone when the last clone is dropped.
    Memory(MemoryStore),
    /// A redb file.
    Redb(RedbStore),
    /// A namespace on an etcd cluster.
    #[cfg(feature = "etcd")]
    Etcd(EtcdStore),
}

impl Store {
    /// A fresh in-memory store.
    pub fn memory() -> Store {
        Store::Memory(MemoryStore::default())
    }

    /// Opens (creating if needed) the redb store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Ok(Store::Redb(RedbStore::open(path)?))
    }

    /// The namespace `prefix` on the etcd cluster at `endpoints`; connects on first
    /// use.
    #[cfg(feature = "etcd")]
    pub fn etcd(endpoints: Vec<String>, prefix: &str) -> Store {
        Store::Etcd(EtcdStore::new(endpoints, prefix))
    }

    /// The backend's name, for logs and errors.
    pub fn describe(&self) -> String {
        match self {
            Store::Memory(_) => "memory".into(),
            Store::Redb(r) => r.location(),
            #[cfg(feature = "etcd")]
            Store::Etcd(e) => e.location(),
        }
    }

    /// The value and revisions of `key`.
    pub async fn get(&self, key: &str) -> Result<Option<Kv>, StoreError> {
        check_key(key)?;
        match self {
            Store::Memory(m) => Ok(m.get(key)),
            Store::Redb(r) => {
                let (r, key) = (r.clone(), key.to_string());
                blocking(move || r.get(&key)).await
            }
            #[cfg(feature = "etcd")]
            Store::Etcd(e) => e.get(key).await,
        }
    }

    /// Every key starting with `prefix` (all keys for `""`), in key order.
    pub async fn range(&self, prefix: &str) -> Result<Vec<Kv>, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.range(prefix)),
            Store::Redb(r) => {
                let (r, prefix) = (r.clone(), prefix.to_string());
                blocking(move || r.range(&prefix)).await
            }
            #[cfg(feature = "etcd")]
            Store::Etcd(e) => e.range(prefix).await,
        }
    }

    /// Applies `txn` atomically if its compares hold.
    pub async fn txn(&self, txn: Txn) -> Result<TxnOutcome, StoreError> {
        txn.validate()?;
        match self {
            Store::Memory(m) => Ok(m.txn(&txn)),
            Store::Redb(r) => {
                let r = r.clone();
                blocking(move || r.txn(&txn)).await
            }
            #[cfg(feature = "etcd")]
            Store::Etcd(e) => e.txn(&txn).await,
        }
    }

    /// The current store revision (0 for an empty, never-written store).
    pub async fn revision(&self) -> Result<u64, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.revision()),
            Store::Redb(r) => {
                let r = r.clone();
                blocking(move || r.revision()).await
            }
            #[cfg(feature = "etcd")]
            Store::Etcd(e) => e.revision().await,
        }
    }

    /// Puts one key unconditionally; returns the new revision.
    pub async fn put(&self, key: &str, value: impl Into<Vec<u8>>) -> Result<u64, StoreError> {
        Ok(self.txn(Txn::new().put(key, value)).await?.revision())
    }

    /// Deletes one key; returns whether it existed.
    pub async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let Some(kv) = self.get(key).await? else {
            return Ok(false);
        };
        let t = Txn::new()
            .when(Compare::ModRevision(key.into(), kv.mod_revision))
            .delete(key);
        Ok(self.txn(t).await?.committed())
    }

    /// Writes `value` if `key` is at `expected` (`None`: absent).
    pub async fn cas(
        &self,
        key: &str,
        expected: Option<u64>,
        value: impl Into<Vec<u8>>,
    ) -> Result<TxnOutcome, StoreError> {
        let c = match expected {
            None => Compare::Absent(key.into()),
            Some(r) => Compare::ModRevision(key.into(), r),
        };
        self.txn(Txn::new().when(c).put(key, value)).await
    }
}

/// Runs blocking store work without stalling other tasks. On a multi-threaded runtime
/// it runs in place, the worker's other tasks handed to another thread: the caller
/// (the scheduler's loop, waiting on its commit) has nothing else to do, and this
/// saves the two thread wake-ups of a trip to the blocking pool, 14 % more durable
/// submissions per second on two cores. A single-threaded runtime has no thread to
/// hand its tasks to, so there the work goes to the blocking pool. Outside a runtime
/// (a plain test, a CLI command) it runs inline.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let Ok(h) = tokio::runtime::Handle::try_current() else {
        return f();
    };
    if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
        return tokio::task::block_in_place(f);
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Backend {
            location: "blocking pool".into(),
            message: e.to_string(),
        })?
}
