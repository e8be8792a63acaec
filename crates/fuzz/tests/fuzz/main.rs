//! One fuzz target per reader and config parser (see the crate docs). Each proptest
//! feeds arbitrary bytes and mutated samples and requires an `Ok` or an `Err`, within a
//! watchdog.

mod configs;
mod traces;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh file under this run's temporary directory.
pub fn tmp_file(name: &str, body: &[u8]) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!("apiary-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("{}-{name}", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&p, body).unwrap();
    p
}
