//! The conformance suite on every backend, and crash safety of the redb file under
//! SIGKILL.

use apiary_store::{Store, StoreError, testing};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("apiary-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_backend_conforms() {
    testing::suite(&Store::memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redb_backend_conforms() {
    let dir = scratch("suite");
    let n = AtomicUsize::new(0);
    testing::suite(&|| {
        let p = dir.join(format!("s{}.redb", n.fetch_add(1, Ordering::Relaxed)));
        Store::open(&p).unwrap()
    })
    .await;
    let p = dir.join("reopen.redb");
    testing::reopen_keeps_everything(&|| Store::open(&p).unwrap()).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_file_open_elsewhere_or_unwritable_is_a_clear_error() {
    let dir = scratch("errors");
    let p = dir.join("a.redb");
    let _first = Store::open(&p).unwrap();
    let e = Store::open(&p).unwrap_err();
    assert!(matches!(e, StoreError::Backend { .. }), "{e}");
    assert!(e.to_string().contains("a.redb"), "{e}");
    let e = Store::open(&dir.join("no/such/dir/b.redb")).unwrap_err();
    assert!(e.to_string().contains("b.redb"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn replace_in_file(path: &std::path::Path, from: &[u8], to: &[u8]) -> usize {
    let mut bytes = std::fs::read(path).unwrap();
    let mut n = 0;
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
            n += 1;
        }
        i += 1;
    }
    std::fs::write(path, bytes).unwrap();
    n
}

#[tokio::test]
async fn a_record_edited_in_the_file_is_reported_corrupt() {
    let dir = scratch("edited");
    let p = dir.join("a.redb");
    {
        let s = Store::open(&p).unwrap();
        s.put("jobs/1", &b"{\"name\":\"AAAA-original-record\"}"[..])
            .await
            .unwrap();
    }
    // Bytes changed under redb: its page checksums refuse the file, naming it.
    let copy = dir.join("b.redb");
    std::fs::copy(&p, &copy).unwrap();
    assert!(replace_in_file(&copy, b"AAAA-original", b"BBBB-original") > 0);
    let e = Store::open(&copy).unwrap_err();
    assert!(e.to_string().contains("b.redb"), "{e}");
    // A record rewritten through redb itself (a tool, a bug) keeps redb content, but
    // not the record's own checksum.
    rewrite_value(&p, "jobs/1", |v| v.replace("AAAA", "BBBB"));
    let e = Store::open(&p).unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt { key, .. } if key == "jobs/1"),
        "{e}"
    );
    assert!(e.to_string().contains("a.redb"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rewrites the bytes of `key`'s value through redb, keeping its header as it was.
fn rewrite_value(path: &std::path::Path, key: &str, edit: impl Fn(String) -> String) {
    use redb::{Database, ReadableTable, TableDefinition};
    let db = Database::create(path).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut kv = w
            .open_table(TableDefinition::<&str, &[u8]>::new("kv"))
            .unwrap();
        let raw = kv.get(key).unwrap().unwrap().value().to_vec();
        let (head, body) = raw.split_at(20);
        let mut v = head.to_vec();
        v.extend_from_slice(edit(String::from_utf8_lossy(body).into_owned()).as_bytes());
        kv.insert(key, v.as_slice()).unwrap();
    }
    w.commit().unwrap();
}

#[tokio::test]
async fn a_damaged_or_truncated_file_is_an_error_naming_it_never_a_panic() {
    let dir = scratch("damaged");
    let garbage = dir.join("garbage.redb");
    std::fs::write(
        &garbage,
        (0..65536u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let e = Store::open(&garbage).unwrap_err();
    assert!(e.to_string().contains("garbage.redb"), "{e}");
    let cut = dir.join("cut.redb");
    {
        let s = Store::open(&cut).unwrap();
        for i in 0..200 {
            s.put(&format!("jobs/{i:04}"), vec![b'x'; 500])
                .await
                .unwrap();
        }
    }
    let len = std::fs::metadata(&cut).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    match Store::open(&cut) {
        Err(e) => assert!(e.to_string().contains("cut.redb"), "{e}"),
        // redb may recover the last committed state from a torn tail; then every record
        // it returns passed its checksum.
        Ok(s) => {
            s.range("").await.unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_file_written_before_checksums_is_read_and_then_checked() {
    use redb::{Database, TableDefinition};
    let dir = scratch("old");
    let p = dir.join("old.redb");
    {
        // The layout before checksums: revisions, then the bytes.
        let db = Database::create(&p).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut kv = w
                .open_table(TableDefinition::<&str, &[u8]>::new("kv"))
                .unwrap();
            let mut v = Vec::new();
            v.extend_from_slice(&1u64.to_le_bytes());
            v.extend_from_slice(&1u64.to_le_bytes());
            v.extend_from_slice(b"old-value-kept");
            kv.insert("jobs/1", v.as_slice()).unwrap();
            let mut meta = w
                .open_table(TableDefinition::<&str, u64>::new("meta"))
                .unwrap();
            meta.insert("revision", 1).unwrap();
        }
        w.commit().unwrap();
    }
    {
        let s = Store::open(&p).unwrap();
        let kv = s.get("jobs/1").await.unwrap().unwrap();
        assert_eq!(
            (kv.value.as_slice(), kv.create_revision, kv.mod_revision),
            (&b"old-value-kept"[..], 1, 1)
        );
    }
    // Migrated: an edit is now caught.
    rewrite_value(&p, "jobs/1", |v| v.replace("old", "new"));
    assert!(matches!(
        Store::open(&p).unwrap_err(),
        StoreError::Corrupt { .. }
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Child mode of the crash test: appends keys `k/<n>` forever, printing each `n` once its
/// put returned (the acknowledgement a server would send).
#[test]
fn crash_child_writer() {
    let Ok(path) = std::env::var("APIARY_STORE_CRASH_CHILD") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = Store::open(std::path::Path::new(&path)).unwrap();
        let mut n = s.revision().await.unwrap();
        let mut out = std::io::stdout().lock();
        loop {
            n += 1;
            s.put(&format!("k/{n:08}"), n.to_string()).await.unwrap();
            writeln!(out, "{n}").unwrap();
            out.flush().unwrap();
        }
    });
}

#[test]
fn a_killed_writer_loses_no_acknowledged_write() {
    let dir = scratch("crash");
    let path = dir.join("crash.redb");
    let exe = std::env::current_exe().unwrap();
    let mut acked = 0u64;
    for round in 0..6u64 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child_writer",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("APIARY_STORE_CRASH_CHILD", &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Kill after a varying number of acknowledgements, mid-stream.
        let stop_after = 20 + round * 37;
        let mut seen = 0;
        while seen < stop_after {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Ok(n) = l.trim().parse::<u64>() {
                        acked = acked.max(n);
                        seen += 1;
                    }
                }
                _ => break,
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(seen >= stop_after, "round {round}: the child stopped early");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let s = Store::open(&path).unwrap();
            let rev = s.revision().await.unwrap();
            let all = s.range("k/").await.unwrap();
            assert!(
                rev >= acked,
                "round {round}: revision {rev} < acknowledged {acked}"
            );
            assert_eq!(all.len() as u64, rev, "round {round}: one key per revision");
            for (i, kv) in all.iter().enumerate() {
                assert_eq!(kv.key, format!("k/{:08}", i + 1), "round {round}: no gap");
                assert_eq!(kv.mod_revision, i as u64 + 1);
            }
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The etcd backend against a real etcd (Debian's `etcd-server`), started here on
/// loopback ports with its data in a scratch directory.
#[cfg(feature = "etcd")]
mod etcd {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn etcd_backend_conforms() {
        let Some(e) = testing::etcd::Etcd::start("suite").await else {
            return;
        };
        let n = AtomicUsize::new(0);
        testing::suite(&|| {
            let ns = format!("suite/{}", n.fetch_add(1, Ordering::Relaxed));
            Store::etcd(vec![e.url.clone()], &ns)
        })
        .await;
        testing::reopen_keeps_everything(&|| Store::etcd(vec![e.url.clone()], "reopen")).await;
    }

    /// Leader election's guarantee, on the store: one leader at a time, and once its
    /// lease has run out and another has taken over, the old leader's fenced writes
    /// are refused with an error (never applied, never a silent conflict).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deposed_leader_cannot_write() {
        use apiary_store::EtcdStore;
        let Some(e) = testing::etcd::Etcd::start("leader").await else {
            return;
        };
        let a = EtcdStore::new(vec![e.url.clone()], "ha");
        let b = EtcdStore::new(vec![e.url.clone()], "ha");
        // etcd's shortest lease is 2 s at its default election timeout.
        let mut la = a
            .campaign("http://a:8800", 2)
            .await
            .unwrap()
            .expect("a leads");
        assert!(
            b.campaign("http://b:8800", 2).await.unwrap().is_none(),
            "one leader"
        );
        let (who, since) = b.leader().await.unwrap().unwrap();
        assert_eq!((who.as_str(), since), ("http://a:8800", la.revision));
        a.fence(Some(la.revision));
        let sa = Store::Etcd(a.clone());
        assert!(sa.put("jobs/1", "by a").await.is_ok());
        assert!(
            a.renew(&mut la).await.unwrap(),
            "renewed in time, a still leads"
        );
        // a stops renewing (a paused or cut-off process): its lease runs out.
        tokio::time::sleep(std::time::Duration::from_secs(4)).await;
        assert!(!a.renew(&mut la).await.unwrap(), "expired");
        let lb = b
            .campaign("http://b:8800", 2)
            .await
            .unwrap()
            .expect("b leads");
        b.fence(Some(lb.revision));
        let sb = Store::Etcd(b.clone());
        assert!(sb.put("jobs/2", "by b").await.is_ok());
        // a, deposed, cannot write: its fence names the old leader key.
        let err = sa.put("jobs/1", "late a").await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Fenced { leader: Some(l), .. } if l == "http://b:8800"),
            "{err}"
        );
        assert!(err.to_string().contains("http://b:8800 leads now"), "{err}");
        let kv = sb.get("jobs/1").await.unwrap().unwrap();
        assert_eq!(kv.value, b"by a", "the late write was not applied");
        b.resign(lb).await.unwrap();
        assert_eq!(a.leader().await.unwrap(), None, "resigned: no leader");
    }

    #[tokio::test]
    async fn an_unreachable_etcd_is_an_error_naming_it() {
        let s = Store::etcd(vec!["http://127.0.0.1:1".into()], "x");
        let e = s.get("a").await.unwrap_err();
        assert!(matches!(e, StoreError::Backend { .. }), "{e}");
        assert!(e.to_string().contains("etcd http://127.0.0.1:1"), "{e}");
    }
}
