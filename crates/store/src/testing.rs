//! The conformance suite: what every backend must do, checked the same way for each
//! (openraft's storage suite is the model). A backend's tests call [`suite`] with a
//! constructor of fresh stores, inside a multi-threaded tokio runtime, and persistent
//! backends also call [`reopen_keeps_everything`].
//!
//! Failures panic with the case's name: this module is test support.

use crate::{Compare, MAX_KEY_BYTES, MAX_VALUE_BYTES, Store, StoreError, Txn, TxnOutcome};

/// Runs every case, each on a fresh store from `make`.
pub async fn suite(make: &dyn Fn() -> Store) {
    empty_store(make()).await;
    put_get_revisions(make()).await;
    range_is_by_prefix_in_key_order(make()).await;
    delete_and_recreate(make()).await;
    conflict_changes_nothing(make()).await;
    txn_is_atomic_at_one_revision(make()).await;
    cas_is_compare_and_swap(make()).await;
    compare_only_txn_writes_nothing(make()).await;
    bad_input_is_refused_and_changes_nothing(make()).await;
    large_value_round_trips(make()).await;
    concurrent_cas_loses_no_update(make()).await;
}

async fn empty_store(s: Store) {
    assert_eq!(s.revision().await.unwrap(), 0, "empty: revision");
    assert_eq!(s.get("a").await.unwrap(), None, "empty: get");
    assert!(s.range("").await.unwrap().is_empty(), "empty: range");
}

async fn put_get_revisions(s: Store) {
    assert_eq!(s.put("a", "1").await.unwrap(), 1);
    assert_eq!(s.put("a", "2").await.unwrap(), 2);
    assert_eq!(s.put("b", "3").await.unwrap(), 3);
    let a = s.get("a").await.unwrap().expect("a");
    assert_eq!(
        (a.value.as_slice(), a.create_revision, a.mod_revision),
        (&b"2"[..], 1, 2),
        "put: a's value and revisions"
    );
    let b = s.get("b").await.unwrap().expect("b");
    assert_eq!((b.create_revision, b.mod_revision), (3, 3), "put: b");
    assert_eq!(s.revision().await.unwrap(), 3, "put: store revision");
}

async fn range_is_by_prefix_in_key_order(s: Store) {
    for k in ["jobs/2", "jobs/10", "jobs/1", "nodes/a", "jobs", "jobz"] {
        s.put(k, k).await.unwrap();
    }
    let keys = |v: Vec<crate::Kv>| v.into_iter().map(|kv| kv.key).collect::<Vec<_>>();
    assert_eq!(
        keys(s.range("jobs/").await.unwrap()),
        ["jobs/1", "jobs/10", "jobs/2"],
        "range: prefix, byte order"
    );
    assert_eq!(
        keys(s.range("").await.unwrap()),
        ["jobs", "jobs/1", "jobs/10", "jobs/2", "jobz", "nodes/a"],
        "range: everything"
    );
    assert!(s.range("x").await.unwrap().is_empty(), "range: no match");
}

async fn delete_and_recreate(s: Store) {
    s.put("k", "v").await.unwrap();
    assert!(s.delete("k").await.unwrap(), "delete: existing");
    assert!(!s.delete("k").await.unwrap(), "delete: missing");
    assert_eq!(s.get("k").await.unwrap(), None, "delete: gone");
    let rev = s.put("k", "w").await.unwrap();
    let kv = s.get("k").await.unwrap().unwrap();
    assert_eq!(
        (kv.create_revision, kv.mod_revision),
        (rev, rev),
        "delete: a recreated key starts a new life"
    );
}

async fn conflict_changes_nothing(s: Store) {
    s.put("a", "1").await.unwrap();
    let before = s.range("").await.unwrap();
    let rev = s.revision().await.unwrap();
    let out = s
        .txn(
            Txn::new()
                .when(Compare::ModRevision("a".into(), rev + 7))
                .put("a", "2")
                .put("b", "2")
                .delete("a"),
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        TxnOutcome::Conflict { revision: rev },
        "conflict: outcome"
    );
    let out = s
        .txn(Txn::new().when(Compare::Absent("a".into())).put("c", "3"))
        .await
        .unwrap();
    assert!(
        !out.committed(),
        "conflict: absent compare on a present key"
    );
    assert_eq!(
        s.range("").await.unwrap(),
        before,
        "conflict: data unchanged"
    );
    assert_eq!(
        s.revision().await.unwrap(),
        rev,
        "conflict: revision unchanged"
    );
}

async fn txn_is_atomic_at_one_revision(s: Store) {
    s.put("gone", "x").await.unwrap();
    let out = s
        .txn(
            Txn::new()
                .when(Compare::Absent("j1".into()))
                .put("j1", "a")
                .put("j2", "b")
                .put("j1", "c")
                .delete("gone"),
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        TxnOutcome::Committed { revision: 2 },
        "txn: one revision"
    );
    let all = s.range("").await.unwrap();
    assert_eq!(all.len(), 2, "txn: delete applied");
    assert_eq!(all[0].value, b"c", "txn: later op wins");
    assert!(
        all.iter().all(|kv| kv.mod_revision == 2),
        "txn: same revision"
    );
}

async fn cas_is_compare_and_swap(s: Store) {
    let first = s.cas("lock", None, "me").await.unwrap();
    assert!(first.committed(), "cas: create when absent");
    assert!(
        !s.cas("lock", None, "you").await.unwrap().committed(),
        "cas: second create fails"
    );
    let rev = first.revision();
    assert!(
        s.cas("lock", Some(rev), "me2").await.unwrap().committed(),
        "cas: right revision"
    );
    assert!(
        !s.cas("lock", Some(rev), "stale").await.unwrap().committed(),
        "cas: stale revision"
    );
    assert_eq!(s.get("lock").await.unwrap().unwrap().value, b"me2");
}

async fn compare_only_txn_writes_nothing(s: Store) {
    s.put("a", "1").await.unwrap();
    let out = s
        .txn(Txn::new().when(Compare::ModRevision("a".into(), 1)))
        .await
        .unwrap();
    assert_eq!(out, TxnOutcome::Committed { revision: 1 }, "compare-only");
    assert_eq!(
        s.revision().await.unwrap(),
        1,
        "compare-only: no new revision"
    );
}

async fn bad_input_is_refused_and_changes_nothing(s: Store) {
    s.put("a", "1").await.unwrap();
    let long = "k".repeat(MAX_KEY_BYTES + 1);
    assert!(
        matches!(s.put("", "x").await, Err(StoreError::BadKey(_))),
        "empty key"
    );
    assert!(
        matches!(s.get(&long).await, Err(StoreError::BadKey(_))),
        "long key"
    );
    let big = vec![0u8; MAX_VALUE_BYTES + 1];
    let r = s.txn(Txn::new().put("b", "ok").put("c", big)).await;
    assert!(matches!(r, Err(StoreError::BadValue { .. })), "big value");
    assert_eq!(s.revision().await.unwrap(), 1, "bad input: no write");
    assert_eq!(
        s.get("b").await.unwrap(),
        None,
        "bad input: nothing applied"
    );
}

async fn large_value_round_trips(s: Store) {
    let v: Vec<u8> = (0..(1 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    s.put("big", v.clone()).await.unwrap();
    assert_eq!(s.get("big").await.unwrap().unwrap().value, v, "1 MiB value");
}

async fn concurrent_cas_loses_no_update(s: Store) {
    const TASKS: u64 = 8;
    const EACH: u64 = 40;
    s.put("counter", "0").await.unwrap();
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            let mut done = 0;
            while done < EACH {
                let kv = s.get("counter").await.unwrap().unwrap();
                let n: u64 = String::from_utf8(kv.value).unwrap().parse().unwrap();
                let out = s
                    .cas("counter", Some(kv.mod_revision), (n + 1).to_string())
                    .await
                    .unwrap();
                if out.committed() {
                    done += 1;
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let kv = s.get("counter").await.unwrap().unwrap();
    assert_eq!(
        String::from_utf8(kv.value).unwrap(),
        (TASKS * EACH).to_string(),
        "concurrent cas: every increment kept"
    );
    assert_eq!(
        s.revision().await.unwrap(),
        1 + TASKS * EACH,
        "concurrent cas: one revision per committed write"
    );
}

/// For persistent backends: what was committed is there after the store is dropped and
/// opened again (`open` must open the same place), and revisions continue from it.
pub async fn reopen_keeps_everything(open: &dyn Fn() -> Store) {
    let before;
    let rev;
    {
        let s = open();
        for i in 0..100u32 {
            s.put(&format!("jobs/{i:05}"), i.to_string()).await.unwrap();
        }
        s.txn(Txn::new().delete("jobs/00007").put("nodes/a", "up"))
            .await
            .unwrap();
        before = s.range("").await.unwrap();
        rev = s.revision().await.unwrap();
    }
    let s = open();
    assert_eq!(s.range("").await.unwrap(), before, "reopen: data");
    assert_eq!(s.revision().await.unwrap(), rev, "reopen: revision");
    assert_eq!(
        s.put("x", "y").await.unwrap(),
        rev + 1,
        "reopen: revisions continue"
    );
}

/// A one-member etcd on loopback ports for tests (Debian's `etcd-server`), with its data
/// in a scratch directory; killed, and the directory removed, on drop.
#[cfg(feature = "etcd")]
pub mod etcd {
    use crate::Store;
    use std::path::PathBuf;
    use std::process::{Command, Stdio};

    /// A running member.
    pub struct Etcd {
        child: std::process::Child,
        dir: PathBuf,
        /// Its client URL.
        pub url: String,
    }

    impl Drop for Etcd {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_or(0, |a| a.port())
    }

    /// A cluster of members on loopback ports, which a test may kill and restart one
    /// at a time; all killed, and their directories removed, on drop.
    pub struct Cluster {
        members: Vec<(Option<std::process::Child>, Vec<String>)>,
        dir: PathBuf,
        /// The members' client URLs.
        pub urls: Vec<String>,
    }

    impl Drop for Cluster {
        fn drop(&mut self) {
            for i in 0..self.members.len() {
                self.kill(i);
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    impl Cluster {
        /// Starts `n` members and waits until the cluster answers; `None` as for
        /// [`Etcd::start`].
        pub async fn start(name: &str, n: usize) -> Option<Cluster> {
            if !installed() {
                return None;
            }
            let dir = scratch(name);
            let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
            let initial: Vec<String> = ports
                .iter()
                .enumerate()
                .map(|(i, p)| format!("m{i}=http://127.0.0.1:{}", p.1))
                .collect();
            let mut c = Cluster {
                members: Vec::new(),
                dir: dir.clone(),
                urls: ports
                    .iter()
                    .map(|p| format!("http://127.0.0.1:{}", p.0))
                    .collect(),
            };
            for (i, (client, peer)) in ports.iter().enumerate() {
                let url = format!("http://127.0.0.1:{client}");
                let peer_url = format!("http://127.0.0.1:{peer}");
                let data = dir.join(format!("m{i}")).display().to_string();
                let name = format!("m{i}");
                let initial = initial.join(",");
                let args: Vec<String> = [
                    "--name",
                    name.as_str(),
                    "--data-dir",
                    data.as_str(),
                    "--listen-client-urls",
                    url.as_str(),
                    "--advertise-client-urls",
                    url.as_str(),
                    "--listen-peer-urls",
                    peer_url.as_str(),
                    "--initial-advertise-peer-urls",
                    peer_url.as_str(),
                    "--initial-cluster",
                    initial.as_str(),
                    "--max-request-bytes",
                    "10485760",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                c.members.push((Some(spawn(&args)), args));
            }
            let probe = Store::etcd(c.urls.clone(), "probe");
            let t0 = std::time::Instant::now();
            while let Err(err) = probe.revision().await {
                assert!(t0.elapsed().as_secs() < 60, "etcd did not start: {err}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Some(c)
        }

        /// Kills member `i` (SIGKILL).
        pub fn kill(&mut self, i: usize) {
            if let Some(mut c) = self.members[i].0.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }

        /// Starts member `i` again on its data.
        pub fn restart(&mut self, i: usize) {
            self.kill(i);
            let child = spawn(&self.members[i].1);
            self.members[i].0 = Some(child);
        }
    }

    fn installed() -> bool {
        if Command::new("etcd").arg("--version").output().is_ok() {
            return true;
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "etcd is not installed (apt-get install etcd-server)"
        );
        eprintln!("skipped: etcd is not installed");
        false
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("apiary-etcd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    }

    fn spawn(args: &[String]) -> std::process::Child {
        Command::new("etcd")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts")
    }

    impl Etcd {
        /// Starts a member and waits until it answers; `None` (the test skips) where
        /// etcd is not installed, except under CI, where that fails.
        pub async fn start(name: &str) -> Option<Etcd> {
            if !installed() {
                return None;
            }
            let dir = scratch(name);
            let (client, peer) = (free_port(), free_port());
            let url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let child = Command::new("etcd")
                .args(["--name", "m0", "--data-dir"])
                .arg(dir.join("data"))
                .args([
                    "--listen-client-urls",
                    &url,
                    "--advertise-client-urls",
                    &url,
                ])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("m0={peer_url}")])
                // The store's largest value, 8 MiB, fits a request.
                .args(["--max-request-bytes", "10485760"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("etcd starts");
            let e = Etcd { child, dir, url };
            let probe = Store::etcd(vec![e.url.clone()], "probe");
            let t0 = std::time::Instant::now();
            while let Err(err) = probe.revision().await {
                assert!(t0.elapsed().as_secs() < 30, "etcd did not start: {err}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Some(e)
        }
    }
}
