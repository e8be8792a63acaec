//! The etcd backend (feature `etcd`): the same revisioned key-value API on an etcd
//! cluster, so several servers can share state that survives the loss of any one
//! machine. etcd answers a write only once a quorum of its members has it on disk,
//! which is the durability a `201` promises.
//!
//! Each store lives under a namespace (`PREFIX`): its keys are `PREFIX/kv/KEY`, and
//! `PREFIX/base` marks the etcd revision at which the namespace began. Revisions are
//! etcd's, counted from that mark, so a namespace starts at revision 0 and a
//! transaction's revision is the one etcd gave it. etcd's revision is the whole
//! cluster's: where other namespaces (or a leader election) write to the same cluster,
//! revisions still increase with every write but may skip numbers.
//!
//! etcd takes one operation per key in a transaction, so of several on one key the
//! last is sent, which is what applying them in order leaves (a key deleted and put
//! again in one transaction keeps its creation revision, where the embedded store
//! starts it anew).
//!
//! The client connects on first use, so a store is made without waiting on the
//! network; the first call says if etcd cannot be reached.

use crate::{Compare, Kv, Op, StoreError, Txn, TxnOutcome};
use etcd_client::{
    Client, Compare as EtcdCompare, CompareOp, ConnectOptions, EventType, GetOptions, KvClient,
    LeaseClient, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn as EtcdTxn, TxnOp, WatchClient,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::sync::OnceCell;

/// Keys read per request of a range: a page of records stays far below gRPC's limits.
const PAGE: i64 = 500;
/// The largest reply the client decodes: a page of the largest values.
const MAX_REPLY_BYTES: usize = 1 << 30;

/// A connected namespace.
struct Conn {
    kv: KvClient,
    lease: LeaseClient,
    watch: WatchClient,
    /// The etcd revision the namespace began at (revision 0 of this store).
    base: i64,
}

/// An etcd namespace; cheap to clone (clones share the connection).
#[derive(Clone)]
pub struct EtcdStore {
    endpoints: Arc<Vec<String>>,
    prefix: Arc<str>,
    conn: Arc<OnceCell<Conn>>,
    /// The etcd revision at which this store's server became leader, which every write
    /// requires the leader key still to have (0: no fence).
    fence: Arc<AtomicI64>,
}

/// Leadership of a namespace: its leader key, held by a lease that must be renewed
/// within its time to live, and the revision at which it was taken. A store fenced with
/// that revision ([`EtcdStore::fence`]) writes only while the key is still this one.
pub struct Leadership {
    id: i64,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
    /// The revision (of this store) at which it was taken: the fencing token.
    pub revision: u64,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lease {:x} at revision {}", self.id, self.revision)
    }
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.location())
    }
}

impl EtcdStore {
    /// The namespace `prefix` on the etcd cluster at `endpoints` (`http://host:port`);
    /// connects on first use.
    pub fn new(endpoints: Vec<String>, prefix: &str) -> EtcdStore {
        EtcdStore {
            endpoints: Arc::new(endpoints),
            prefix: prefix.trim_end_matches('/').into(),
            conn: Arc::new(OnceCell::new()),
            fence: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Where it is, for logs and errors.
    pub fn location(&self) -> String {
        format!("etcd {} ({})", self.endpoints.join(","), self.prefix)
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Backend {
            location: self.location(),
            message: e.to_string(),
        }
    }

    fn key(&self, k: &str) -> String {
        format!("{}/kv/{k}", self.prefix)
    }

    fn base_key(&self) -> String {
        format!("{}/base", self.prefix)
    }

    fn leader_key(&self) -> String {
        format!("{}/leader", self.prefix)
    }

    /// Tries once to become the namespace's leader, as `me` (how others reach it): the
    /// leader key is created, held by a lease of `ttl_s` seconds, if no one holds it.
    /// `None` when another holds it.
    pub async fn campaign(&self, me: &str, ttl_s: i64) -> Result<Option<Leadership>, StoreError> {
        let c = self.conn().await?;
        let mut lease = c.lease.clone();
        let id = reaching(|| {
            let mut lease = c.lease.clone();
            async move { lease.grant(ttl_s, None).await }
        })
        .await
        .map_err(|e| self.err(e))?
        .id();
        let key = self.leader_key();
        let t = EtcdTxn::new()
            .when([EtcdCompare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, me, Some(PutOptions::new().with_lease(id)))]);
        let r = reaching(|| {
            let (mut kv, t) = (c.kv.clone(), t.clone());
            async move { kv.txn(t).await }
        })
        .await
        .map_err(|e| self.err(e))?;
        if !r.succeeded() {
            let _ = lease.revoke(id).await;
            return Ok(None);
        }
        let revision = rel(r.header().map_or(c.base, |h| h.revision()), c.base);
        let (keeper, stream) = reaching(|| {
            let mut lease = c.lease.clone();
            async move { lease.keep_alive(id).await }
        })
        .await
        .map_err(|e| self.err(e))?;
        Ok(Some(Leadership {
            id,
            keeper,
            stream,
            revision,
        }))
    }

    /// Renews `l`'s lease; false once it has expired (the leadership is lost).
    pub async fn renew(&self, l: &mut Leadership) -> Result<bool, StoreError> {
        let once = async {
            l.keeper.keep_alive().await?;
            l.stream.message().await
        };
        if let Ok(Some(r)) = once.await {
            return Ok(r.ttl() > 0);
        }
        // The stream broke (its member went down): open one again, to any member; a
        // lease that expired meanwhile answers with no time left.
        let c = self.conn().await?;
        let id = l.id;
        let (keeper, stream) = reaching(|| {
            let mut lease = c.lease.clone();
            async move { lease.keep_alive(id).await }
        })
        .await
        .map_err(|e| self.err(e))?;
        (l.keeper, l.stream) = (keeper, stream);
        l.keeper.keep_alive().await.map_err(|e| self.err(e))?;
        match l.stream.message().await.map_err(|e| self.err(e))? {
            Some(r) => Ok(r.ttl() > 0),
            None => Ok(false),
        }
    }

    /// Gives the leadership up at once (its key goes with its lease).
    pub async fn resign(&self, l: Leadership) -> Result<(), StoreError> {
        let c = self.conn().await?;
        c.lease
            .clone()
            .revoke(l.id)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Waits, at most `limit`, until no one leads: the leader key is deleted, or its
    /// lease runs out. Returns whether that happened (false: still led at the limit).
    pub async fn leader_gone(&self, limit: Duration) -> Result<bool, StoreError> {
        let c = self.conn().await?;
        let key = self.leader_key();
        let wait = async {
            let mut stream = c.watch.clone().watch(key.clone(), None).await?;
            // Gone before the watch began: nothing more will come.
            if c.kv.clone().get(key, None).await?.kvs().is_empty() {
                return Ok(true);
            }
            while let Some(r) = stream.message().await? {
                if r.events()
                    .iter()
                    .any(|e| e.event_type() == EventType::Delete)
                {
                    return Ok(true);
                }
            }
            Ok(false)
        };
        match tokio::time::timeout(limit, wait).await {
            Ok(r) => r.map_err(|e: etcd_client::Error| self.err(e)),
            Err(_) => Ok(false),
        }
    }

    /// Who leads the namespace now, and since which revision.
    pub async fn leader(&self) -> Result<Option<(String, u64)>, StoreError> {
        let c = self.conn().await?;
        let key = self.leader_key();
        let r = reaching(|| {
            let (mut kv, key) = (c.kv.clone(), key.clone());
            async move { kv.get(key, None).await }
        })
        .await
        .map_err(|e| self.err(e))?;
        Ok(r.kvs().first().map(|kv| {
            let who = String::from_utf8_lossy(kv.value()).into_owned();
            (who, rel(kv.mod_revision(), c.base))
        }))
    }

    /// From now on every transaction of this store (and its clones) also requires the
    /// leader key to be the one taken at `revision` (`None`: no such condition). A
    /// deposed leader's writes then fail as conflicts: it cannot write.
    pub fn fence(&self, revision: Option<u64>) {
        let v = revision.map_or(0, |r| i64::try_from(r).unwrap_or(i64::MAX).max(1));
        self.fence.store(v, Ordering::SeqCst);
    }

    /// The connection, made (and the namespace's mark set) on first use.
    async fn conn(&self) -> Result<&Conn, StoreError> {
        self.conn
            .get_or_try_init(|| async {
                let opts = ConnectOptions::new()
                    .with_connect_timeout(Duration::from_secs(5))
                    .with_timeout(Duration::from_secs(3))
                    .with_require_leader(true);
                let client = Client::connect(self.endpoints.as_slice(), Some(opts))
                    .await
                    .map_err(|e| self.err(e))?;
                let kv = client
                    .kv_client()
                    .max_decoding_message_size(MAX_REPLY_BYTES);
                let lease = client.lease_client();
                let watch = client.watch_client();
                // The mark: created once, by whichever store opens the namespace first.
                let mark = self.base_key();
                let t = EtcdTxn::new()
                    .when([EtcdCompare::version(mark.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(mark.clone(), "", None)]);
                reaching(|| {
                    let (mut kv, t) = (kv.clone(), t.clone());
                    async move { kv.txn(t).await }
                })
                .await
                .map_err(|e| self.err(e))?;
                let r = reaching(|| {
                    let (mut kv, mark) = (kv.clone(), mark.clone());
                    async move { kv.get(mark, None).await }
                })
                .await
                .map_err(|e| self.err(e))?;
                let base = r
                    .kvs()
                    .first()
                    .map(|m| m.create_revision())
                    .ok_or_else(|| self.err("the namespace's mark vanished as it was made"))?;
                Ok(Conn {
                    kv,
                    lease,
                    watch,
                    base,
                })
            })
            .await
    }

    fn kv_of(&self, base: i64, kv: &etcd_client::KeyValue) -> Result<Kv, StoreError> {
        let skip = self.prefix.len() + "/kv/".len();
        let key = std::str::from_utf8(kv.key())
            .ok()
            .and_then(|k| k.get(skip..))
            .ok_or_else(|| self.err("a key outside the namespace or not UTF-8"))?;
        Ok(Kv {
            key: key.to_string(),
            value: kv.value().to_vec(),
            create_revision: rel(kv.create_revision(), base),
            mod_revision: rel(kv.mod_revision(), base),
        })
    }

    /// The value and revisions of `key`.
    pub(crate) async fn get(&self, key: &str) -> Result<Option<Kv>, StoreError> {
        let c = self.conn().await?;
        let full = self.key(key);
        let r = reaching(|| {
            let (mut kv, full) = (c.kv.clone(), full.clone());
            async move { kv.get(full, None).await }
        })
        .await
        .map_err(|e| self.err(e))?;
        r.kvs().first().map(|kv| self.kv_of(c.base, kv)).transpose()
    }

    /// Every key starting with `prefix`, in key order, read page by page at one
    /// revision.
    pub(crate) async fn range(&self, prefix: &str) -> Result<Vec<Kv>, StoreError> {
        let c = self.conn().await?;
        let kv = c.kv.clone();
        let full = self.key(prefix);
        let end = prefix_end(full.as_bytes());
        let mut from = full.into_bytes();
        let mut at = 0;
        let mut out = Vec::new();
        loop {
            let mut opts = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if at > 0 {
                opts = opts.with_revision(at);
            }
            let r = reaching(|| {
                let (mut kv, from, opts) = (kv.clone(), from.clone(), opts.clone());
                async move { kv.get(from, Some(opts)).await }
            })
            .await
            .map_err(|e| self.err(e))?;
            if at == 0 {
                at = r.header().map_or(0, |h| h.revision());
            }
            for item in r.kvs() {
                out.push(self.kv_of(c.base, item)?);
            }
            match r.kvs().last() {
                Some(last) if r.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// Applies `txn` atomically if its compares hold.
    pub(crate) async fn txn(&self, txn: &Txn) -> Result<TxnOutcome, StoreError> {
        let c = self.conn().await?;
        let compares: Vec<EtcdCompare> = txn
            .compares
            .iter()
            .map(|cmp| match cmp {
                Compare::Absent(k) => EtcdCompare::version(self.key(k), CompareOp::Equal, 0),
                Compare::ModRevision(k, r) => EtcdCompare::mod_revision(
                    self.key(k),
                    CompareOp::Equal,
                    i64::try_from(*r).unwrap_or(i64::MAX - c.base) + c.base,
                ),
            })
            .collect();
        let mut compares = compares;
        let fence = self.fence.load(Ordering::SeqCst);
        if fence > 0 {
            compares.push(EtcdCompare::mod_revision(
                self.leader_key(),
                CompareOp::Equal,
                fence + c.base,
            ));
        }
        // etcd takes one operation per key in a transaction: a key's last one, which
        // is what applying them in order leaves.
        let last: std::collections::BTreeMap<&str, usize> = txn
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| match op {
                Op::Put(k, _) | Op::Delete(k) => (k.as_str(), i),
            })
            .collect();
        let ops: Vec<TxnOp> = txn
            .ops
            .iter()
            .enumerate()
            .filter(|(i, op)| match op {
                Op::Put(k, _) | Op::Delete(k) => last.get(k.as_str()) == Some(i),
            })
            .map(|(_, op)| match op {
                Op::Put(k, v) => TxnOp::put(self.key(k), v.clone(), None),
                Op::Delete(k) => TxnOp::delete(self.key(k), None),
            })
            .collect();
        let t = EtcdTxn::new().when(compares).and_then(ops);
        let r = reaching(|| {
            let (mut kv, t) = (c.kv.clone(), t.clone());
            async move { kv.txn(t).await }
        })
        .await
        .map_err(|e| self.err(e))?;
        let revision = rel(r.header().map_or(c.base, |h| h.revision()), c.base);
        if r.succeeded() {
            return Ok(TxnOutcome::Committed { revision });
        }
        // A failed compare may be the fence's: then the leadership is gone, which the
        // caller must hear as an error, never as an ordinary conflict.
        if fence > 0 {
            let now = self.leader().await?;
            if now.as_ref().map(|l| l.1) != u64::try_from(fence).ok() {
                return Err(StoreError::Fenced {
                    location: self.location(),
                    leader: now.map(|l| l.0),
                });
            }
        }
        Ok(TxnOutcome::Conflict { revision })
    }

    /// The current revision.
    pub(crate) async fn revision(&self) -> Result<u64, StoreError> {
        let c = self.conn().await?;
        let mark = self.base_key();
        let r = reaching(|| {
            let (mut kv, mark) = (c.kv.clone(), mark.clone());
            async move { kv.get(mark, Some(GetOptions::new().with_keys_only())).await }
        })
        .await
        .map_err(|e| self.err(e))?;
        Ok(rel(r.header().map_or(c.base, |h| h.revision()), c.base))
    }
}

/// Whether `e` is etcd being unavailable for a moment: a member down (the request
/// never left, or got no answer in time), or the cluster electing its leader
/// (`request timed out`, `leader changed`). Sending the request again is safe for
/// reads, and for the server's writes, which put whole records: applied twice, they
/// leave the same state.
fn transient(e: &etcd_client::Error) -> bool {
    // gRPC's UNAVAILABLE, DEADLINE_EXCEEDED, and CANCELLED as the client's own timeout.
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if matches!(i32::from(s.code()), 14 | 4)
            || (i32::from(s.code()) == 1 && s.message().contains("Timeout")))
}

/// Runs `call` until etcd takes it: again, after a growing pause, while it is
/// unavailable for a moment ([`transient`]); at most [`TRIES`] times (about 10 s).
async fn reaching<T, F, Fut>(mut call: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let mut k = 0;
    loop {
        match call().await {
            Err(e) if transient(&e) && k + 1 < TRIES => {
                k += 1;
                tokio::time::sleep(Duration::from_millis(50 * k)).await;
            }
            r => return r,
        }
    }
}

/// Tries of a request while etcd is unavailable.
const TRIES: u64 = 20;

/// An etcd revision counted from the namespace's mark.
fn rel(abs: i64, base: i64) -> u64 {
    u64::try_from(abs.saturating_sub(base)).unwrap_or(0)
}

/// The first key after every key starting with `p` (etcd's range end for a prefix).
fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (never, for a namespace's keys): to the end of the key space.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_at_its_successor() {
        assert_eq!(prefix_end(b"a/kv/jobs/"), b"a/kv/jobs0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(rel(105, 100), 5);
        assert_eq!(rel(99, 100), 0);
    }
}
