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
